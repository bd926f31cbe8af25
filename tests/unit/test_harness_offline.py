"""The harness's parts that run no program: the command line's parser and the callgrind reader.

callgrind is the harness's independent counter; here its output is parsed
and mapped to link-time addresses from text the tests write, so nothing is
compiled or run.  tests/toolchain/test_harness.py runs the harness itself.
"""

from __future__ import annotations


def test_cli_is_registered():
    from generator.cli import make_parser

    args = make_parser().parse_args(["harness", "--elf", "x", "--all", "--", "true"])
    assert args.elf == "x" and args.command[-1] == "true"


def test_callgrind_live_addresses_use_the_recorded_bias(tmp_path):
    """Should a callgrind dump live addresses, the load bias from the locate run maps them; else it is an error."""
    from generator.run.callgrind import ObjectCounts, ProcessDump, aggregate

    lib = tmp_path / "libt.so"
    lib.write_bytes(b"x")
    live = ObjectCounts(ir={0x7F0000001000: 3, 0x7F0000001004: 2}, fn={0x7F0000001000: "f"})
    dumps = [ProcessDump(7, "t", {str(lib): live})]
    total, used, mapping, errors = aggregate(dumps, {7: [0x7F0000000000]}, str(lib), [(0x1000, 0x2000)])
    assert total.ir == {0x1000: 3, 0x1004: 2} and used == 1 and not errors
    assert mapping == ["live addresses less the load bias the harness recorded"]
    total, used, mapping, errors = aggregate(dumps, {}, str(lib), [(0x1000, 0x2000)])
    assert errors and not total.ir
    linked = [ProcessDump(8, "t", {str(lib): ObjectCounts(ir={0x1000: 1})})]
    assert aggregate(linked, {}, str(lib), [(0x1000, 0x2000)])[2] == ["link-time addresses as dumped"]


def test_callgrind_parser(tmp_path):
    """Calls, PLT-free call costs, jumps, conditional jumps and the rep self-jump correction."""
    from generator.isa.amd64.oracle import rep_string
    from generator.run.callgrind import parse

    f = tmp_path / "cg.out"
    f.write_text(
        "version: 1\ncreator: callgrind-3.19.0\npid: 4242\ncmd:  ./x\npart: 1\n\n"
        "positions: instr line\nevents: Ir\nsummary: 99\n\n"
        "ob=(1) /lib/libx.so\nfl=(1) ???\nfn=(1) f\n"
        "0x1000 0 5\n"
        "cfn=(2) g\ncalls=5 0x2000 0\n0x1000 0 77\n"  # inclusive cost of the call: not an execution
        "+3 0 5\n"  # 0x1003
        "jcnd=3/5 0x1010 0\n+0 0\n"
        "0x1008 0 2\n0x1008 0 40\njcnd=38/40 0x1008 0\n0x1008 0\n"
        "fn=(2)\n0x2000 0 5\njump=5 0x1005 0\n0x2000 0\n"
        "ob=(1)\nfn=(1)\n0x1000 0 1\n"
        "totals: 99\n"
    )
    d = parse(f)
    assert d.pid == 4242
    oc = d.objects["/lib/libx.so"]
    assert oc.ir == {0x1000: 6, 0x1003: 5, 0x1008: 42, 0x2000: 5}
    assert oc.jcnd[0x1003] == [3, 5] and oc.jcnd[0x1008] == [38, 40]
    assert oc.self_jumps == {0x1008: 38}
    assert oc.fn[0x2000] == "g" and oc.fn[0x1000] == "f"
    assert rep_string(bytes.fromhex("f3a4")) and rep_string(bytes.fromhex("f348ab")) and rep_string(bytes.fromhex("f3a6"))
    assert not rep_string(bytes.fromhex("f30f7e05")) and not rep_string(bytes.fromhex("a4"))
    assert not rep_string(bytes.fromhex("f390"))  # pause
