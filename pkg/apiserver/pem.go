package apiserver

import "encoding/pem"

// splitPEM returns each PEM block of data, re-encoded.
func splitPEM(data []byte) [][]byte {
	var out [][]byte
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		out = append(out, pem.EncodeToMemory(b))
	}
}
