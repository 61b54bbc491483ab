package sysmem

import "strconv"

// FS describes the file system holding a path.
type FS struct {
	// Type names the file system as statfs reports it: "ext4" (ext2 and ext3
	// share its magic number), "xfs", "btrfs", "tmpfs", "overlay", "nfs",
	// "cifs", "smb2", "fuse", "lustre", ...; "0x<magic>" for a number this
	// package does not know; "unknown" outside Linux.
	Type string
	// Network is true for network and user-space file systems (NFS,
	// CIFS/SMB, FUSE, Lustre, 9p, Ceph, GPFS, BeeGFS, AFS, ...): each mmap
	// page fault there is a round trip, 10–50× slower than large sequential
	// reads, so the loader reads with pread in large chunks. FUSE counts even
	// when local (sshfs, s3fs, gcsfuse, virtiofs): every fault still goes
	// through a user-space server.
	Network bool
}

// fsInfo is a file system's name and whether it is network-backed.
type fsInfo struct {
	name    string
	network bool
}

// magics maps statfs f_type numbers (linux/magic.h and the file systems'
// own headers) to names.
var magics = map[uint32]fsInfo{
	// Local disks and memory.
	0xEF53:     {"ext4", false},
	0x58465342: {"xfs", false},
	0x9123683E: {"btrfs", false},
	0x2FC12FC1: {"zfs", false},
	0xF2F52010: {"f2fs", false},
	0xCA451A4E: {"bcachefs", false},
	0x3153464A: {"jfs", false},
	0x52654973: {"reiserfs", false},
	0x3434:     {"nilfs", false},
	0x4D44:     {"vfat", false},
	0x2011BAB0: {"exfat", false},
	0x5346544E: {"ntfs", false},
	0x7461636F: {"ocfs2", false},
	0x01021994: {"tmpfs", false},
	0x858458F6: {"ramfs", false},
	0x794C7630: {"overlay", false},
	0x61756673: {"aufs", false},
	0x73717368: {"squashfs", false},
	0xE0F5E1E2: {"erofs", false},
	0x9660:     {"iso9660", false},
	0xF15F:     {"ecryptfs", false},
	0x9FA0:     {"proc", false},
	0x62656572: {"sysfs", false},
	// Network and user-space file systems.
	0x6969:     {"nfs", true},
	0x517B:     {"smb", true},
	0xFF534D42: {"cifs", true},
	0xFE534D42: {"smb2", true},
	0x65735546: {"fuse", true},
	0x0BD00BD0: {"lustre", true},
	0x01021997: {"9p", true},
	0x00C36400: {"ceph", true},
	0x47504653: {"gpfs", true},
	0x19830326: {"beegfs", true},
	0x5346414F: {"afs", true},
	0x6B414653: {"afs", true}, // kAFS
	0x73757245: {"coda", true},
	0xAAD7AAEA: {"panfs", true},
	0x20030528: {"orangefs", true},
}

// fsFromMagic names a statfs f_type number.
func fsFromMagic(magic uint32) FS {
	if info, ok := magics[magic]; ok {
		return FS{Type: info.name, Network: info.network}
	}
	return FS{Type: "0x" + strconv.FormatUint(uint64(magic), 16)}
}
