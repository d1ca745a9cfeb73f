package config

import (
	"encoding/hex"
	"strings"

	"github.com/sluice-proxy/sluice/filter/request/cidr"
)

// Admin is the filter's admin route (sluicectl quota --envoy): requests
// under PathPrefix are answered by the filter itself, and only for a
// client address in ClientCIDRs with a bearer token whose SHA-256 is
// TokenSHA256. Nil, the default, is no admin route.
type Admin struct {
	// PathPrefix starts and ends with '/' and holds only lower-case
	// letters, digits, '/', '-', '.', '_' and '~', no empty or dot
	// segment: the form a request path is normalised to before it is
	// compared (see the admin route in filter/engine).
	PathPrefix string
	// ClientCIDRs holds the addresses allowed to call, compared with the
	// connection's address (never client_ip's, see the admin route in
	// filter/engine).
	ClientCIDRs *cidr.Set
	// TokenSHA256 is the SHA-256 of the bearer token; the configuration
	// never holds the token itself.
	TokenSHA256 [32]byte
}

// DefaultAdminPathPrefix is admin.path_prefix when it is not set.
const DefaultAdminPathPrefix = "/.sluice/"

var adminFields = fieldsOf[wireAdmin]()

func (p *parser) admin(o *object) *Admin {
	a := &Admin{PathPrefix: DefaultAdminPathPrefix}
	if s, ok := o.str("path_prefix"); ok {
		if adminPrefix(s) {
			a.PathPrefix = s
		} else {
			o.errorf("path_prefix", `%s: want a path such as "/.sluice/": starting and ending with "/", of lower-case letters, digits, "-", ".", "_" and "~", without empty, "." or ".." segments`, Quote(s))
		}
	}
	if !o.has("client_cidrs") {
		o.errorf("client_cidrs", "required: the addresses allowed to call the admin route")
	}
	a.ClientCIDRs = p.cidrList(o, "client_cidrs", "must not be empty: no address could call the admin route")
	if s, ok := o.str("token_sha256"); ok {
		sum, err := hex.DecodeString(s)
		if err != nil || len(sum) != len(a.TokenSHA256) {
			o.errorf("token_sha256", "want the SHA-256 of the token as 64 hex digits (sha256sum), not the token")
		} else {
			copy(a.TokenSHA256[:], sum)
		}
	} else if !o.has("token_sha256") {
		o.errorf("token_sha256", "required: the SHA-256 of the bearer token, as 64 hex digits")
	}
	return a
}

// adminPrefix reports whether s is a path prefix in normal form: it must
// be, since request paths are compared after normalisation.
func adminPrefix(s string) bool {
	if len(s) < 3 || len(s) > 64 || s[0] != '/' || s[len(s)-1] != '/' {
		return false
	}
	for _, seg := range strings.Split(s[1:len(s)-1], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
				return false
			}
		}
	}
	return true
}
