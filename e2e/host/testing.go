package host

import "sort"

// Fault injection for tests. Envoy gives an operator no way to write shared
// data from outside a VM, but another plugin sharing the vm_id, or a bug in
// an older build of this one, can leave any bytes there; these let a test
// plant them.

// SetSharedData stores value under key in vmID's shared data as a guest's
// unconditional proxy_set_shared_data would, bumping the CAS so a guest
// holding the old CAS gets a mismatch.
func (r *Runtime) SetSharedData(vmID, key string, value []byte) {
	s := r.sharedStore(vmID)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = sharedEntry{val: append([]byte(nil), value...), cas: r.nextCAS()}
}

// SharedDataKeyNames lists vmID's shared-data keys in order, so a test can
// find the entries a plugin created.
func (r *Runtime) SharedDataKeyNames(vmID string) []string {
	s := r.sharedStore(vmID)
	s.mu.Lock()
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	sort.Strings(keys)
	return keys
}
