package engine

// propCodeDetails is Envoy's response.code_details attribute: why the
// response is what it is, which tells a breaker a local reply from an
// upstream's.
var propCodeDetails = []string{"response", "code_details"}

// StatusCode reads an HTTP status; 0 for anything but one to three
// digits.
func StatusCode(s string) int {
	if len(s) == 0 || len(s) > 3 {
		return 0
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0
		}
		n = n*10 + int(s[i]-'0')
	}
	return n
}
