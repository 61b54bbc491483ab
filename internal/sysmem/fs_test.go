package sysmem

import (
	"errors"
	"io/fs"
	"path/filepath"
	"runtime"
	"testing"
)

func TestFileSystemTempDir(t *testing.T) {
	got, err := FileSystem(t.TempDir())
	if err != nil {
		t.Fatalf("FileSystem: %v", err)
	}
	if got.Type == "" {
		t.Error("empty Type")
	}
	if runtime.GOOS != "linux" && got.Type != "unknown" {
		t.Errorf("Type %q outside Linux, want unknown", got.Type)
	}
	// A test's temporary folder is on a local disk or tmpfs here; if CI
	// ever puts TMPDIR on NFS this fails and says so.
	if got.Network {
		t.Errorf("t.TempDir() is on %+v, a network file system", got)
	}
	t.Logf("%+v", got)
}

func TestFileSystemMissing(t *testing.T) {
	_, err := FileSystem(filepath.Join(t.TempDir(), "missing"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestFSFromMagic(t *testing.T) {
	cifs32 := int32(-11317950) // 0xFF534D42 as a 32-bit f_type
	for _, tc := range []struct {
		magic uint32
		want  FS
	}{
		{0xEF53, FS{"ext4", false}},
		{0x58465342, FS{"xfs", false}},
		{0x9123683E, FS{"btrfs", false}},
		{0x01021994, FS{"tmpfs", false}},
		{0x794C7630, FS{"overlay", false}},
		{0x2FC12FC1, FS{"zfs", false}},
		{0x6969, FS{"nfs", true}},
		{0xFF534D42, FS{"cifs", true}},
		{uint32(cifs32), FS{"cifs", true}},
		{0xFE534D42, FS{"smb2", true}},
		{0x517B, FS{"smb", true}},
		{0x65735546, FS{"fuse", true}},
		{0x0BD00BD0, FS{"lustre", true}},
		{0x01021997, FS{"9p", true}},
		{0x00C36400, FS{"ceph", true}},
		{0x47504653, FS{"gpfs", true}},
		{0x19830326, FS{"beegfs", true}},
		{0x1234abcd, FS{"0x1234abcd", false}},
		{0, FS{"0x0", false}},
	} {
		if got := fsFromMagic(tc.magic); got != tc.want {
			t.Errorf("fsFromMagic(%#x) = %+v, want %+v", tc.magic, got, tc.want)
		}
	}
}
