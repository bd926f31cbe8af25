# Shared by the fake tools: the state directory and the fault list.
state=${FAKEBSD_STATE:-/tmp/fakebsd}
mkdir -p "$state"
touch "$state/loaded"
fault() { case " ${FAKEBSD_FAIL:-} " in *" $1 "*) return 0 ;; esac; return 1; }
loaded() { grep -qx "$1" "$state/loaded"; }
