#!/usr/bin/python3
"""The Debian package (scripts/package), checked as an operator would meet it.

Builds it from the build directory given, then: `dpkg-deb -c` lists the
binaries, man pages, conffile and unit; the control data names its
dependencies and conffile; the unit passes `systemd-analyze verify` and
keeps its hardening (`systemd-analyze security`) in a scratch root holding
the unpacked package; and the packaged binary starts from the packaged
config (data directory and ports moved to scratch ones by flags, which win)
and serves, speaking systemd's notify protocol to a socket this test holds
in systemd's place: READY=1 after recovery with the addresses in STATUS,
WATCHDOG=1 at half of WATCHDOG_USEC, RELOADING=1 then READY=1 on SIGHUP,
STOPPING=1 on SIGTERM, and a clean exit.

    check.py SOURCE_DIR BUILD_DIR
"""
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SOURCE, BUILD = sys.argv[1], sys.argv[2]


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def run(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=300, **kw).stdout


deb = run(os.path.join(SOURCE, "scripts/package"), BUILD).strip().splitlines()[-1]
check(os.path.isfile(deb), f"no package at {deb}")

# The files an operator looks for.
listing = run("dpkg-deb", "-c", deb)
files = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
for want in ["/usr/bin/delayd", "/usr/bin/delayctl", "/usr/share/man/man1/delayd.1.gz",
             "/usr/share/man/man1/delayctl.1.gz", "/etc/delayd/delayd.toml",
             "/lib/systemd/system/delayd.service", "/usr/share/delayd/proto/delayd/v1/jobs.proto",
             "/usr/share/bash-completion/completions/delayctl", "/usr/share/doc/delayd/operations.md"]:
    check(want in files, f"dpkg-deb -c lacks {want}:\n{listing}")
check(re.search(r"^-rw-r----- root/root .* ./etc/delayd/delayd.toml$", listing, re.M),
      "the config is not readable by everyone")
depends = run("dpkg-deb", "-f", deb, "Depends")
for pkg in ["libsystemd0", "libsqlite3-0", "libpq5", "libgrpc++1.51", "adduser"]:
    check(pkg in depends, f"Depends lacks {pkg}: {depends}")
check(run("dpkg-deb", "-I", deb, "conffiles").split() == ["/etc/delayd/delayd.toml"], "conffiles")
for script in ["postinst", "prerm", "postrm"]:
    text = run("dpkg-deb", "-I", deb, script)
    subprocess.run(["sh", "-n"], input=text, check=True, text=True)
check("adduser --system" in run("dpkg-deb", "-I", deb, "postinst"), "postinst makes the user")

root = tempfile.mkdtemp(prefix="delayd-pkg-")
try:
    run("dpkg-deb", "-x", deb, root)
    man = gzip.open(os.path.join(root, "usr/share/man/man1/delayd.1.gz"), "rt").read()
    check(man.startswith(".\\\"") and ".TH DELAYD" in man and "api\\-tokens\\-file" in man,
          "the man page is made from --help")

    # The unit, verified where it will live: a root with systemd's own units
    # and /bin/kill (its ExecReload) as an installed system has them.
    shutil.copytree("/lib/systemd/system", os.path.join(root, "lib/systemd/system"),
                    symlinks=True, dirs_exist_ok=True)
    os.makedirs(os.path.join(root, "bin"), exist_ok=True)
    shutil.copy("/bin/kill", os.path.join(root, "bin/kill"))
    unit = "/lib/systemd/system/delayd.service"
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", "--root=" + root, unit],
                            capture_output=True, text=True, timeout=60)
    check(verify.returncode == 0 and verify.stdout + verify.stderr == "",
          f"systemd-analyze verify: {verify.returncode} {verify.stdout}{verify.stderr}")
    security = run("systemd-analyze", "security", "--offline=yes", "--root=" + root, unit)
    exposure = float(re.search(r"Overall exposure level for delayd.service: ([0-9.]+)", security)[1])
    check(exposure <= 2.0, f"hardening lost: exposure {exposure}\n{security}")
    text = open(os.path.join(root, unit.lstrip("/"))).read()
    for line in ["Type=notify", "WatchdogSec=", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "ReadWritePaths=/var/lib/delayd", "PrivateTmp=yes", "User=delayd"]:
        check(line in text, f"the unit lacks {line}")

    # The packaged binary, from the packaged config, under a notify socket.
    scratch = tempfile.mkdtemp(prefix="delayd-pkg-run-")
    notify_path = os.path.join(scratch, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify_path)
    sock.settimeout(1)
    env = dict(os.environ, NOTIFY_SOCKET=notify_path, WATCHDOG_USEC="600000")
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.Popen(
        [os.path.join(root, "usr/bin/delayd"), "--config", os.path.join(root, "etc/delayd/delayd.toml"),
         "--data-dir", os.path.join(scratch, "data"), "--http", "127.0.0.1:0",
         "--beanstalk", "127.0.0.1:0"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(scratch, "log"), "w"))
    try:
        def messages(until, seconds):
            """Datagrams until one holds `until` (a line), within `seconds`."""
            got, deadline = [], time.monotonic() + seconds
            while time.monotonic() < deadline:
                try:
                    lines = sock.recv(4096).decode().splitlines()
                except socket.timeout:
                    continue
                got.append(lines)
                if until in lines:
                    return got
            log = open(os.path.join(scratch, "log")).read()
            raise AssertionError(f"no {until} within {seconds} s: {got}\n{log}")

        ready = messages("READY=1", 30)[-1]
        status = next(l for l in ready if l.startswith("STATUS="))
        port = int(re.search(r"http=127\.0\.0\.1:(\d+)", status)[1])
        base = f"http://127.0.0.1:{port}"
        check(json.load(urllib.request.urlopen(base + "/healthz", timeout=5))["status"] == "ok", "healthz")
        req = urllib.request.Request(base + "/v1/topics/pkg/jobs", data=b'{"body":"packaged"}',
                                     headers={"Content-Type": "application/json"}, method="POST")
        job = json.load(urllib.request.urlopen(req, timeout=5))
        check(job["body"] == "packaged", f"a job: {job}")
        pings = [m for m in messages("WATCHDOG=1", 5) if "WATCHDOG=1" in m]
        pings += [m for m in messages("WATCHDOG=1", 5) if "WATCHDOG=1" in m]
        check(len(pings) >= 2, "watchdog pings")
        proc.send_signal(signal.SIGHUP)
        reload = messages("READY=1", 10)
        check(any(l.startswith("RELOADING=1") for m in reload for l in m), f"RELOADING=1: {reload}")
        proc.send_signal(signal.SIGTERM)
        messages("STOPPING=1", 10)
        check(proc.wait(timeout=30) == 0, "a clean exit")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()
        shutil.rmtree(scratch, ignore_errors=True)
finally:
    shutil.rmtree(root, ignore_errors=True)
print("package: ok", deb)
