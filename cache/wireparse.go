package cache

// The wire store's name comparisons (wirestore.go). Names, A/AAAA lengths
// and the OPT record are read with resolver/dnswire, as the upstream's wire
// check reads them.

// sameNameFold reports whether wire (uncompressed wire form) spells name
// (presentation form, fully qualified, no escapes), letters compared
// without case.
func sameNameFold(wire []byte, name string) bool {
	j := 0
	for i := 0; i < len(wire); {
		l := int(wire[i])
		if l == 0 {
			return j == len(name) || (name == "." && j == 0)
		}
		if j+l >= len(name) || name[j+l] != '.' {
			return false
		}
		for k := range l {
			if lowerASCII(wire[i+1+k]) != lowerASCII(name[j+k]) {
				return false
			}
		}
		i += 1 + l
		j += l + 1
	}
	return false
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
