package pagecache

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDrop drops pages of a file mapping, whole and in unaligned or short
// parts, and reads the same bytes afterwards: they fault back in from the
// file.
func TestDrop(t *testing.T) {
	ps := os.Getpagesize()
	want := make([]byte, 8*ps+100)
	for i := range want {
		want[i] = byte(i * 7)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, len(want), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	for _, r := range [][2]int{{0, len(m)}, {1, ps + 1}, {ps - 1, 3*ps + 7}, {10, 20}, {len(m) - 50, len(m)}, {0, 0}} {
		if !bytes.Equal(m, want) {
			t.Fatal("mapping differs from the file before dropping")
		}
		Drop(m[r[0]:r[1]])
		if !bytes.Equal(m, want) {
			t.Fatalf("after Drop(m[%d:%d]) the mapping differs from the file", r[0], r[1])
		}
	}
}

// TestPopulate: a fresh anonymous mapping's last page is not resident
// until Populate(write) maps it (or the kernel refuses the advice, before
// 5.14); its bytes stay zero; an unaligned part of it is widened to whole
// pages.
func TestPopulate(t *testing.T) {
	ps := os.Getpagesize()
	m, err := syscall.Mmap(-1, 0, 16*ps, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	b := m[100 : 8*ps-3]
	if LastPageResident(b) {
		t.Fatal("a fresh mapping's last page is resident")
	}
	Populate(b, true)
	if !LastPageResident(b) {
		t.Skip("MADV_POPULATE_WRITE refused (a kernel before 5.14)")
	}
	if LastPageResident(m[9*ps:]) {
		t.Error("a page past the part was mapped")
	}
	if !bytes.Equal(m, make([]byte, len(m))) {
		t.Error("Populate changed bytes")
	}
	Populate(m[12*ps:13*ps], false)
	if !LastPageResident(m[12*ps : 13*ps]) {
		t.Error("MADV_POPULATE_READ did not map the page")
	}
}
