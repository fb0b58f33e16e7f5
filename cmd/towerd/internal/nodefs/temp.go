package nodefs

import (
	"crypto/rand"
	"encoding/hex"
	"path"
	"strings"
)

// Temp names: every file written goes first to a new file with an
// unpredictable name beside it, so nobody can plant a link there in
// advance; the names are still recognisable, so what a killed install or
// uninstall left behind is swept by the next one.

// TempName is an unpredictable name beside name: ".<base>.towerd-<16 hex>".
// IsTempName recognises it, so a temp file left by an install that was
// killed is removed by the next install or uninstall.
func TempName(name string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return path.Join(path.Dir(name), "."+path.Base(name)+TempMarker+hex.EncodeToString(b[:]))
}

// TempMarker is what every temp name has after its base name.
const TempMarker = ".towerd-"

// IsTempName reports whether base (a name without its directory) is one
// TempName made.
func IsTempName(base string) bool {
	i := strings.LastIndex(base, TempMarker)
	if !strings.HasPrefix(base, ".") || i < 2 {
		return false
	}
	suffix := base[i+len(TempMarker):]
	_, err := hex.DecodeString(suffix)
	return len(suffix) == 16 && err == nil
}
