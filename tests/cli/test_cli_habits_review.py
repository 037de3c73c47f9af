"""A review of the first-hour CLI habits: what `klog consume --json` writes with any flag still goes
back through `klog produce --input json`, and a refusal names what the line is."""

from __future__ import annotations

import klog
from tests.cli.test_cli import assert_one_line_error


def records(data_dir, topic):
    with klog.open(data_dir) as s:
        return [(r.key, r.value, r.headers) for r in s.consumer(topic)]


def test_consume_json_txn_fields_copies_back_without_its_markers(cli, data_dir):
    with klog.open(data_dir) as s:
        s.create_topic("x", 1)
        s.create_topic("y", 1)
        with s.producer(transactional_id="review") as p:
            with p.transaction():
                p.send("x", b"c1", key=b"k", headers=[("h", None)])
                p.send("x", None, key=b"k")
        with s.producer() as plain:
            plain.send("x", b"plain")
    lines = cli("consume", "x", "--json", "--txn-fields")
    assert lines.exit_code == 0 and b'"control": true' in lines.stdout, lines
    r = cli("produce", "y", "--input", "json", input=lines.stdout)
    assert r.exit_code == 0 and r.stderr == "", r
    # the COMMIT marker is the log's bookkeeping, not a record: no tombstone stands for it in the copy
    assert records(data_dir, "y") == [(b"k", b"c1", [("h", None)]), (b"k", None, []), (None, b"plain", [])]


def test_klog_dump_json_lines_are_named_as_such(cli, data_dir):
    cli("produce", "d", input=b"a\n")
    dumped = cli("dump", "d-0", "--json")
    assert dumped.exit_code == 0, dumped
    r = cli("produce", "e", "--input", "json", input=dumped.stdout)
    assert_one_line_error(r, 2, "line 1", "klog dump --json", "klog consume --json")


def test_iso_calendar_durations_are_refused_naming_why(cli):
    cli("produce", "g", input=b"a\n")
    for args in (("consume", "g", "--since", "P1M"), ("consume", "g", "-o", "s@P1Y"),
                 ("groups", "reset-offsets", "grp", "--topic", "g", "--by-duration", "P2W")):
        assert_one_line_error(cli(*args), 2, "no fixed length", "P30D")


def test_a_flag_given_as_its_default_still_disagrees_with_x(cli, data_dir):
    # --acks -1 is all, the default: -X acks=1 took over without a word, a weaker durability than asked
    for flag, x in ((("--acks", "-1"), "acks=1"), (("--acks", "all"), "acks=0"),
                    (("-z", "none"), "compression.type=gzip"), (("--linger-ms", "0"), "linger.ms=5"),
                    (("--batch-size", "1000000"), "batch.size=1000")):
        r = cli("produce", "x", *flag, "-X", x, input=b"a\n")
        assert_one_line_error(r, 2, flag[0], f"-X {x.split('=')[0]}", "disagree")
    for args in (("-X", "acks=0"), ("--acks", "1", "-X", "acks=1"), ("--acks", "-1", "-X", "acks=all"), ()):
        r = cli("produce", "x", *args, input=b"b\n")
        assert r.exit_code == 0 and r.stderr in ("", "klog: created topic 'x' with the store's defaults\n"), r
    assert [v for _, v, _ in records(data_dir, "x")] == [b"b"] * 4


def test_a_json_lines_file_with_a_byte_order_mark_and_crlf_still_reads(cli, data_dir, tmp_path):
    # an editor's UTF-8 BOM before the first line: json.loads(bytes) skipped it before the kcat -J change
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"key": "k", "value": "bom"}\r\n{"value": "crlf"}\r\n')
    r = cli("produce", "b", "--input", "json", str(path))
    assert r.exit_code == 0, r
    assert records(data_dir, "b") == [(b"k", b"bom", []), (None, b"crlf", [])]


def test_a_header_name_that_is_not_utf8_copies_back_and_prints(cli, data_dir):
    # kcat -J writes a header name's bytes as they are; stored, it made `consume --json` and -F %h of
    # the topic stop with a traceback
    cli("topics", "create", "h")
    r = cli("produce", "h", "--input", "json", input=b'{"payload": "v", "headers": ["h\xff", "x"]}\n')
    assert r.exit_code == 0, r
    assert records(data_dir, "h") == [(None, b"v", [("h\udcff", b"x")])]
    assert cli("consume", "h", "-F", "%h\n").stdout == b"h\xff=x\n"
    assert cli("consume", "h", "--grep-header", "^h.=x$").stdout == b"v\n"
    dumped = cli("dump", "h-0")
    assert dumped.exit_code == 0 and b"=x" in dumped.stdout, dumped
    lines = cli("consume", "h", "--json")
    assert lines.exit_code == 0 and b'"h\\udcff"' in lines.stdout, lines
    lines.stdout.decode("utf-8")  # the line stays UTF-8 text
    assert cli("produce", "h2", "--input", "json", input=lines.stdout).exit_code == 0
    assert records(data_dir, "h2") == records(data_dir, "h")


def test_the_terminal_view_shows_a_header_name_that_is_not_utf8(store):
    from klog.cli.view import TerminalView

    store.create_topic("h", 1)
    with store.producer() as p:
        p.send("h", b"v", headers=[("h\udcff", b"x")])
    [r] = list(store.consumer("h"))
    assert "h\ufffd=x" in TerminalView(show_topic=False, color=False).line(r)


def test_format_json_with_kcats_delimiters_names_the_options_given(cli):
    cli("produce", "f", input=b"a\n")
    # it said "use --format or --json, not both" to a user who gave no --json
    assert_one_line_error(cli("consume", "f", "-F", "json", "-K", ":"), 2, "--format or -K/-D")
    assert cli("consume", "f", "-F", "json").stdout.startswith(b'{"topic": "f"')
    assert_one_line_error(cli("consume", "f", "-F", "json", "--json", "-K", ":"), 2, "--format or -K/-D")
