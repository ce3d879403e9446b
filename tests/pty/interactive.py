"""Drives the cellar shell through a pseudo-terminal, as a person would.

usage: interactive.py CELLAR_BINARY STORE_DIR HISTORY_FILE
Exits 0 when every expectation held; prints what it saw otherwise.
"""
import os
import pty
import select
import sys
import time

binary, store, history = sys.argv[1:4]

pid, fd = pty.fork()
if pid == 0:
    os.execv(binary, [binary, "--store", store, "--history-file", history])

seen = b""


def read_until(needle, timeout=60.0):
    """Reads output until `needle` appears; fails after `timeout` seconds."""
    global seen
    deadline = time.time() + timeout
    while needle.encode() not in seen:
        left = deadline - time.time()
        if left <= 0:
            sys.stderr.write("timed out waiting for %r; output so far:\n%s\n" % (needle, seen.decode(errors="replace")))
            sys.exit(1)
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    position = seen.index(needle.encode()) + len(needle)
    seen = seen[position:]


def send(text):
    # Type like a person: a moment after the prompt, so that the line editor
    # has its terminal set up before the keys arrive.
    time.sleep(0.3)
    os.write(fd, text.encode())


read_until("cellar> ")
# A statement over several lines: the prompt changes until the ';'.
send("CREATE TABLE weather (ROW KEY (location TEXT, n INT(4)),\r")
read_until("...> ")
send("FAMILY m, pressure BIGINT IN m);\r")
read_until("created table weather")
read_until("cellar> ")
send("INSERT INTO weather (location, n, pressure) SELECT 'loc' || CAST(x % 10 AS VARCHAR), x AS n, x * 10 AS pressure FROM generate_series(1, 2000) AS t(x);\r")
read_until("cellar> ")
# Tab completes a table name, then a column name.
send("SELECT count(*) FROM wea\t")
read_until("weather")
send(" WHERE locat\t")
read_until("location")
send(" = 'loc3';\r")
read_until("| 200 ")
read_until("cellar> ")
# A point lookup reports its own time, with no fixed cost of the shell's
# on top (a progress thread once added 0.1 s to every statement).
send("SELECT pressure FROM weather WHERE _key = 'loc3#0003';\r")
read_until("| 30 ")
read_until("1 row in ")
took = seen[: seen.index(b" s")].decode()
if float(took) >= 0.05:
    sys.stderr.write("a point lookup took %s s in the interactive shell\n" % took)
    sys.exit(1)
read_until("cellar> ")
# Ctrl-C cancels a long query and the shell stays.
send("SELECT count(*) FROM generate_series(1, 20000000000) AS a(x), generate_series(1, 3) AS b(y);\r")
time.sleep(1.0)
send("\x03")
read_until("query cancelled")
read_until("cellar> ")
# Ctrl-C on a half-typed line clears it.
send("SELECT 'half\x03")
read_until("cellar> ")
send("SELECT 'still here' AS status;\r")
read_until("still here")
read_until("cellar> ")
# Ctrl-D leaves.
send("\x04")
_, status = os.waitpid(pid, 0)
if os.waitstatus_to_exitcode(status) != 0:
    sys.stderr.write("shell exited with %r\n" % status)
    sys.exit(1)
with open(history, encoding="utf-8") as f:
    entries = f.read()
for wanted in ["CREATE TABLE weather", "SELECT 'still here' AS status;"]:
    if wanted not in entries:
        sys.stderr.write("history lacks %r:\n%s\n" % (wanted, entries))
        sys.exit(1)
print("ok")
