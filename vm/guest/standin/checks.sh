#!/bin/sh
# kinstkit's default checks for the stand-in guest (vm-test --guest standin).
#
# The stand-in is a Linux guest: it cannot load FreeBSD modules.  It proves the
# host side and the meta-disk contract: the script runs, every check's output
# and exit status come back, the modules arrived intact, and the system disk
# is a per-run overlay (this script writes to it; the host checks that the
# base image did not change).
. "${KINSTKIT_META:-/meta}/lib/checks.sh"

check kernel uname -sr
check meta-disk sh -c 'ls -l "$KINSTKIT_META" && test -f "$KINSTKIT_META/run.sh"'
# Modules handed in with --modules: present, ELF, and as big as the host said.
check modules sh -c '
	n=0
	for ko in "$KINSTKIT_META"/modules/*.ko; do
		[ -f "$ko" ] || continue
		magic=$(head -c 4 "$ko" | tail -c 3)
		[ "$magic" = ELF ] || { echo "$ko: not an ELF file"; exit 1; }
		echo "$(basename "$ko") $(wc -c < "$ko") bytes"
		n=$((n + 1))
	done
	echo "modules=$n"'
# Scribble on the system disk: with a per-run overlay the base image stays as it was.
check system-disk-write sh -c 'echo "kinstkit scribble $(date +%s)" | dd of=/dev/vda bs=512 seek=8 conv=notrunc 2>&1 && sync'
# A fixed amount of work (fork, exec, arithmetic), as the FreeBSD checks run dtrace under load.
check workload sh -c 'n=0; while [ $n -lt 50 ]; do n=$((n + 1)); echo x | cat > /dev/null; done; echo "iterations=$n"'
