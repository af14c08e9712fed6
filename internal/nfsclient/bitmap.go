package nfsclient

import "slices"

// Bitmap returns the bitmap4 with the given attribute numbers set, with no
// trailing zero words.
func Bitmap(attrs ...uint32) []uint32 {
	var bm []uint32
	for _, a := range attrs {
		bm = bitmapSet(bm, a)
	}
	return bm
}

// BitmapHas reports whether attribute attr is set in bm.
func BitmapHas(bm []uint32, attr uint32) bool {
	w := int(attr / 32)
	return w < len(bm) && bm[w]&(1<<(attr%32)) != 0
}

// BitmapAttrs lists the attribute numbers set in bm in ascending order,
// which is the order their values appear in an fattr4's attr_vals.
func BitmapAttrs(bm []uint32) []uint32 {
	var attrs []uint32
	for w, word := range bm {
		for b := uint32(0); b < 32; b++ {
			if word&(1<<b) != 0 {
				attrs = append(attrs, uint32(w)*32+b)
			}
		}
	}
	return attrs
}

// BitmapUnion returns a new bitmap with the bits of a and b.
func BitmapUnion(a, b []uint32) []uint32 {
	out := slices.Clone(a)
	for _, attr := range BitmapAttrs(b) {
		out = bitmapSet(out, attr)
	}
	return out
}

// bitmapSet sets attr in bm, growing it as needed; it may modify bm.
func bitmapSet(bm []uint32, attr uint32) []uint32 {
	w := int(attr / 32)
	for len(bm) <= w {
		bm = append(bm, 0)
	}
	bm[w] |= 1 << (attr % 32)
	return bm
}

// bitmapTrim drops trailing zero words.
func bitmapTrim(bm []uint32) []uint32 {
	for len(bm) > 0 && bm[len(bm)-1] == 0 {
		bm = bm[:len(bm)-1]
	}
	return bm
}
