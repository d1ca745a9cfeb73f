package request

// PathSegment returns the n-th (1-based) non-empty segment of a path
// without its query. Empty segments are skipped, so "//api" and "/api/"
// name the same segment as "/api": doubling a slash moves no request to
// another bucket.
func PathSegment(path string, n int) (string, bool) {
	for i := 0; i < len(path); {
		for i < len(path) && path[i] == '/' {
			i++
		}
		start := i
		for i < len(path) && path[i] != '/' {
			i++
		}
		if i == start {
			break
		}
		if n--; n == 0 {
			return path[start:i], true
		}
	}
	return "", false
}
