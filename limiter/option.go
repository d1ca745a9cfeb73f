package limiter

import "fmt"

// Option resolves one sized setting of a table's config, as NewTable and
// inflight.NewTable read them: 0 takes def, and a value outside [1, most]
// is an error that names the setting.
func Option(name string, v, def, most int) (int, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0 || v > most:
		return 0, fmt.Errorf("%s %d not in [1, %d]", name, v, most)
	}
	return v, nil
}

// RetriesOption resolves a MaxRetries setting: 0 takes def, and a negative
// value asks for none.
func RetriesOption(v, def int) int {
	if v == 0 {
		return def
	}
	return max(v, 0)
}

// PowerOfTwo is the smallest power of two >= n, the size of a table whose
// slots are picked by masking a hash.
func PowerOfTwo(n int) int {
	size := 1
	for size < n {
		size <<= 1
	}
	return size
}
