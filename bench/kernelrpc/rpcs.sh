# rpcs.sh: NFS RPCs per file operation as the stock Linux client sends them to
# bucketfs. A guest script for ../shared/kernelnfs (the Linux 6.1 client in a
# QEMU guest): from a bucketfs checkout,
#
#	go build -o /tmp/bucketfs ./cmd/bucketfs
#	GUEST_VERS="4.2 4.1 4.0" ../shared/kernelnfs/run.sh /tmp/bucketfs "$PWD/bench/kernelrpc/rpcs.sh"
#
# The guest is far too slow for times; this counts what the client sends. Each
# step runs GUEST_RPC_N (default 20) times and prints, from the client's own
# per-operation counters (/proc/self/mountstats), the RPCs of each kind per
# run of the step. RESULT lines carry the totals per step.
. "$JOB/lib.sh"
N=${GUEST_RPC_N:-20}

# ops prints "OP count" for every NFS operation of the mount at $MNT.
ops() {
	awk -v m="$MNT" '
		$1 == "device" { on = ($5 == m) }
		on && /per-op statistics/ { inops = 1; next }
		on && inops && NF > 1 && $1 ~ /:$/ { sub(":", "", $1); print $1, $2 }
		on && inops && NF == 0 { inops = 0 }
	' /proc/self/mountstats
}

# step NAME CMD... runs CMD N times (CMD gets the run number as $1) and
# prints the RPCs it caused, per run.
step() {
	name=$1; shift
	ops > /tmp/before
	for i in $(seq "$N"); do "$@" "$i" || { echo "step $name failed at run $i"; return 1; }; done
	ops > /tmp/after
	line=$(awk -v n="$N" 'NR == FNR { b[$1] = $2; next }
		{ d = $2 - b[$1]; if (d > 0) { printf "%s%s=%.2f", sep, $1, d / n; sep = " "; t += d } }
		END { printf "%stotal=%.2f", sep, t / n }' /tmp/before /tmp/after)
	printf '%-34s %s\n' "$name" "$line"
	result "rpcs_${V}_${name}" "$(echo "$line" | sed 's/.*total=//')" "$line"
}

open_read() { cat "$MNT/rpc/f" > /dev/null; }
stat_one() { stat "$MNT/rpc/f" > /dev/null; }
create_write() { head -c 4096 /dev/zero > "$MNT/rpc/new-$V-$1"; }
append_close() { head -c 10000 /dev/zero >> "$MNT/rpc/log"; }
overwrite_close() { head -c 4096 /dev/zero | dd of="$MNT/rpc/f" conv=notrunc status=none; }
ls_l() { ls -l "$MNT/rpc" > /dev/null; }
read_other() { cat "$MNT/rpc/new-$V-$1" > /dev/null; }
rename_back() { mv "$MNT/rpc/new-$V-$1" "$MNT/rpc/moved-$V-$1"; }
unlink_one() { rm "$MNT/rpc/moved-$V-$1"; }
mkdir_rmdir() { mkdir "$MNT/rpc/d-$1" && rmdir "$MNT/rpc/d-$1"; }

for V in ${GUEST_VERS:-4.1}; do
	check "mount $V" nfs_mount "$V" "${GUEST_OPTS:-}" || { dmesg_tail; summary; exit 1; }
	rm -rf "$MNT/rpc"; mkdir -p "$MNT/rpc"
	head -c 65536 /dev/urandom > "$MNT/rpc/f"
	: > "$MNT/rpc/log"
	cat "$MNT/rpc/f" > /dev/null
	echo "== NFS $V: RPCs per run of each step ($N runs; the file f is 64 KiB, read once before)"
	step open_read_close open_read
	step stat stat_one
	step create_write4k_close create_write
	step append10k_close append_close
	step overwrite4k_close overwrite_close
	step ls_l_dir ls_l
	step read_new_file read_other
	step rename rename_back
	step unlink unlink_one
	step mkdir_rmdir mkdir_rmdir
	echo 3 > /proc/sys/vm/drop_caches
	step open_read_close_after_drop open_read
	check "umount $V" nfs_umount
done
summary
