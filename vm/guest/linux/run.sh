#!/bin/sh
# kinstkit's guest script for `vm-test --guest linux`: the kinst core and a generated table in ring 0 of a
# Linux kernel (generator/run/ring0; docs/vm-test.md, "The Linux guest").  The host puts on the meta disk:
#
#   modules/kinst.ko   the module (sys/modules/kinst/linux/kinst_linux.c, the core, the table)
#   modules/kk_target.ko
#                      the target module (sys/modules/kinst/linux/target/): loaded first, so that it lands
#                      at the same address in both boots; its live .text address goes to out/target-text
#   mode               "capture" (no probes: read the live kernel text back, run the workload unprobed)
#                      or "probe" (arm every probe, run the workload, disarm, report the hits)
#   cycles             probe mode: how many times to disarm and re-arm while the workload runs
#   workload.sh        the workload (vm/guest/linux/workload.sh, or --workload FILE)
#
# The workload's output is out/workload.out in both modes; the host compares the two.
. "${KINSTKIT_META:-/meta}/lib/checks.sh"
M=$KINSTKIT_META
OUT=$KINSTKIT_OUT
export KINSTKIT_META KINSTKIT_OUT
mode=$(cat "$M/mode")

# The workload in the background, the probes disarmed and re-armed meanwhile (probe mode only); its
# output alone on stdout.
stress() {
	sh "$M/workload.sh" > /tmp/workload.out 2>&1 &
	pid=$!
	n=0
	while [ "$n" -lt "$(cat "$M/cycles")" ] && kill -0 "$pid" 2> /dev/null; do
		sleep 1
		echo disarm > /proc/kinst/ctl && echo arm > /proc/kinst/ctl || break
		n=$((n + 1))
	done
	wait "$pid"
	rc=$?
	echo "$n" > "$OUT/rearmed"
	cat /tmp/workload.out
	return "$rc"
}

check kernel sh -c 'uname -r && cat /proc/cmdline && cat /sys/kernel/notes > "$KINSTKIT_OUT/notes.bin"'
check insmod-target sh -c 'insmod "$KINSTKIT_META/modules/kk_target.ko" &&
	cat /sys/module/kk_target/sections/.text | tee "$KINSTKIT_OUT/target-text"'
check insmod insmod "$M/modules/kinst.ko"
check info cat /proc/kinst/info
case $mode in
capture)
	check text sh -c 'cat /proc/kinst/text > "$KINSTKIT_OUT/text.bin" && wc -c < "$KINSTKIT_OUT/text.bin"'
	check workload sh "$M/workload.sh"
	for c in arm disarm hits; do skip "$c" "capture mode arms nothing"; done
	;;
probe)
	skip text "probe mode: the text was captured before"
	check arm sh -c 'echo arm > /proc/kinst/ctl'
	check workload stress
	check disarm sh -c 'echo disarm > /proc/kinst/ctl'
	check hits sh -c 'cat /proc/kinst/hits > "$KINSTKIT_OUT/hits.txt" && wc -l < "$KINSTKIT_OUT/hits.txt"'
	check info-after cat /proc/kinst/info
	;;
*)
	skip workload "unknown mode '$mode'"
	;;
esac
check rmmod rmmod kinst
check rmmod-target rmmod kk_target
check dmesg dmesg
