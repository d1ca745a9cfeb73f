package ops

import "errors"

func adminQuota(a *quotaArgs) (quotaState, error) {
	return quotaState{}, errors.New("--envoy: not built yet")
}
