// SPDX-License-Identifier: Apache-2.0

package gtplab

import (
	"bytes"
	"testing"
)

func TestDecap(t *testing.T) {
	payload := []byte{0x45, 0, 0, 20}
	plain := append([]byte{0x30, 0xff, 0, 4, 0, 0, 2, 0}, payload...)
	if got, ok := Decap(plain, 0x200); !ok || !bytes.Equal(got, payload) {
		t.Fatalf("plain G-PDU: %x %v", got, ok)
	}
	if _, ok := Decap(plain, 0x201); ok {
		t.Fatal("accepted another TEID")
	}
	// E flag with one PDU session container (1 unit = 4 bytes), then payload.
	ext := append([]byte{0x34, 0xff, 0, 12, 0, 0, 2, 0, 0, 0, 0, 0x85, 1, 0x10, 0x01, 0}, payload...)
	if got, ok := Decap(ext, 0x200); !ok || !bytes.Equal(got, payload) {
		t.Fatalf("G-PDU with extension header: %x %v", got, ok)
	}
	if _, ok := Decap([]byte{0x30, 0x1a, 0, 0, 0, 0, 2, 0}, 0x200); ok {
		t.Fatal("accepted an echo request as a G-PDU")
	}
	if _, ok := Decap(plain[:6], 0x200); ok {
		t.Fatal("accepted a truncated header")
	}
}

func TestChecksum(t *testing.T) {
	b := []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1}
	c := checksum(b)
	b[2], b[3] = byte(c>>8), byte(c)
	if checksum(b) != 0 {
		t.Fatal("checksum does not verify")
	}
}
