#!/usr/bin/env python3
"""The job page in a real browser: headless Chromium, driven over the
DevTools protocol on a pipe (--remote-debugging-pipe: no port, no extra
client library).

    page_test.py BIN_DIR                      the browser test (exit 77:
                                              skipped, with why)
    page_test.py --main-job BIN_DIR [PNG]     the main job's page, API and
                                              event files (and a screenshot)

The test starts `cohort launch -n 4 --ui 127.0.0.1:0` with page_task.sh,
whose worker:3 is held before the gang's barrier. From the rendered DOM it
checks the four tasks, the barrier naming worker:3 as missing, and a chart
with at least one point; then it lets worker:3 arrive and checks that the
page shows the barrier gone within 2 s of the API saying so. It also checks
that the API refuses requests without the token, and that `cohort ui`
serves the same API from the job's coordination service.
"""
import json
import os
import queue
import select
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))


class Browser:
    """Headless Chromium and one page, over the DevTools pipe protocol:
    JSON messages ending in a NUL byte; commands on the child's fd 3,
    answers and events on its fd 4."""

    def __init__(self, user_dir):
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            raise FileNotFoundError("no chromium on PATH")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        args = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--disable-extensions", "--disable-dev-shm-usage",
                "--window-size=1280,1400", "--remote-debugging-pipe",
                "--user-data-dir=" + user_dir, "about:blank"]
        # fds 3 and 4 of the child, whatever numbers the pipes got here.
        shell = 'exec 3<&%d 4>&%d; exec "$@"' % (to_child_r, from_child_w)
        self._proc = subprocess.Popen(["sh", "-c", shell, "sh"] + args,
                                      pass_fds=(to_child_r, from_child_w),
                                      stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self._session = None
        target = self.call("Target.createTarget", {"url": "about:blank"})
        self._session = self.call("Target.attachToTarget",
                                  {"targetId": target["targetId"], "flatten": True})["sessionId"]

    def call(self, method, params=None, timeout=30):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if self._session is not None and not method.startswith("Target."):
            msg["sessionId"] = self._session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._next_id:
                    if "error" in reply:
                        raise RuntimeError("%s: %s" % (method, reply["error"]))
                    return reply.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("chromium did not answer %s in %ss" % (method, timeout))
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium exited while answering %s" % method)
            self._buf += chunk

    def navigate(self, url):
        self.call("Page.enable")
        self.call("Page.navigate", {"url": url})

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError("page script failed: %s" % r["exceptionDetails"])
        return r["result"].get("value")

    def screenshot(self, path):
        import base64
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)


# What the test reads from the rendered page.
DOM_STATE = """JSON.stringify({
  updated: document.body.dataset.updated || null,
  tasks: [...document.querySelectorAll('#tasks tbody tr')].map(r => r.dataset.task),
  states: [...document.querySelectorAll('#tasks tbody tr')].map(r => r.children[4].textContent),
  barriers: [...document.querySelectorAll('#barriers .barrier')].map(b => ({
      id: b.dataset.barrier, text: b.textContent,
      missing: b.querySelector('.missing').textContent})),
  points: document.querySelectorAll('#chart-step circle.pt').length,
})"""


class Lines:
    """A process's output lines, read on a thread, so that every wait for
    one has a deadline."""

    def __init__(self, proc):
        self._q = queue.Queue()
        self.seen = []

        def pump():
            for line in proc.stdout:
                self._q.put(line)
            self._q.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def until(self, what, predicate, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._q.get(timeout=max(left, 0))
            except queue.Empty:
                line = None
                left = 0
            if line is None:
                raise AssertionError("no %s within %ss (the process %s); it printed:\n%s"
                                     % (what, timeout, "ended" if left > 0 else "went on",
                                        "".join(self.seen)))
            self.seen.append(line)
            if predicate(line):
                return line

    def rest(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._q.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                raise AssertionError("the process did not end within %ss" % timeout)
            if line is None:
                return self.seen
            self.seen.append(line)


def wait_for(what, check, timeout):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ok, last = check()
        if ok:
            return last
        time.sleep(0.1)
    raise AssertionError("timed out after %ss waiting for %s; last seen: %s" % (timeout, what, last))


def api(base, path, token=None):
    req = urllib.request.Request(base + path)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def run_test(bin_dir):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("SKIPPED: no chromium on PATH (apt-get install chromium)")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="cohort-page-test-")
    hold, done = os.path.join(tmp, "hold"), os.path.join(tmp, "done")
    env = dict(os.environ, PAGE_TEST_BIN=bin_dir, PAGE_TEST_HOLD=hold, PAGE_TEST_DONE=done)
    job = subprocess.Popen(
        [os.path.join(bin_dir, "cohort"), "launch", "-n", "4", "--ui", "127.0.0.1:0",
         "--no-progress", "--log-dir", os.path.join(tmp, "logs"), "--",
         "sh", os.path.join(HERE, "page_task.sh")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    browser = None
    try:
        lines = Lines(job)
        line = lines.until("job page URL", lambda l: "job page: " in l, 60)
        url = line.split("job page: ", 1)[1].strip()
        coordinator = None
        for l in lines.seen:
            if "coordination service listening on " in l:
                coordinator = l.split("listening on ", 1)[1].split()[0]
        base, token = url.split("/?token=")
        # No token, a wrong token: 401 and no data.
        status, body = api(base, "/api/v1/tasks")
        assert status == 401 and "tasks" not in body, (status, body)
        status, body = api(base, "/api/v1/tasks", "0" * len(token))
        assert status == 401 and "tasks" not in body, (status, body)
        status, body = api(base, "/api/v1/tasks", token)
        assert status == 200 and len(body["tasks"]) == 4, (status, body)

        browser = Browser(os.path.join(tmp, "chromium"))
        browser.navigate(url)

        def page_state():
            try:
                return json.loads(browser.evaluate(DOM_STATE))
            except RuntimeError:
                return None  # between navigations

        def held():
            s = page_state()
            ok = (s is not None and sorted(s["tasks"]) == ["worker:0", "worker:1", "worker:2", "worker:3"]
                  and len(s["barriers"]) == 1 and s["barriers"][0]["missing"] == "worker:3"
                  and "3/4 arrived" in s["barriers"][0]["text"] and s["points"] >= 1)
            return ok, s

        s = wait_for("the page to show 4 tasks, the barrier missing worker:3 and a chart point", held, 60)
        print("page while worker:3 is held:", json.dumps(s))

        open(hold, "w").close()

        def api_released():
            status, body = api(base, "/api/v1/barriers", token)
            return status == 200 and body["barriers"] == [], body

        wait_for("the API to show the barrier released", api_released, 60)
        released_at = time.monotonic()

        def page_released():
            s = page_state()
            return s is not None and s["barriers"] == [], s

        s = wait_for("the page to show the barrier released", page_released, 2)
        print("page showed the release %.2f s after the API" % (time.monotonic() - released_at))

        # `cohort ui`: the same API from the coordination service alone.
        assert coordinator, "the launcher did not name its coordination service"
        ui = subprocess.Popen(
            [os.path.join(bin_dir, "cohort"), "ui", "--coordinator", coordinator,
             "--token-file", os.path.join(tmp, "logs", "job-token"), "--ui", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            line = Lines(ui).until("cohort ui's page URL", lambda l: "job page: " in l, 30)
            ui_base, ui_token = line.split("job page: ", 1)[1].strip().split("/?token=")
            assert ui_token == token
            status, body = api(ui_base, "/api/v1/tasks")
            assert status == 401, (status, body)
            status, body = api(ui_base, "/api/v1/tasks", token)
            assert status == 200 and sorted(t["task"] for t in body["tasks"]) == [
                "worker:0", "worker:1", "worker:2", "worker:3"], (status, body)
            wait_for("cohort ui to read every task's metrics", lambda: (
                lambda r: (r[0] == 200 and len(r[1]["series"]) == 4, r))(
                    api(ui_base, "/api/v1/metrics", token)), 10)
            status, body = api(ui_base, "/api/v1/logs/worker:0", token)
            assert status == 404 and "--log-dir of the launcher that runs it" in body["error"], (status, body)
        finally:
            ui.terminate()
            ui.wait(timeout=30)
        return 0
    finally:
        if browser is not None:
            browser.close()
        open(done, "w").close()
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def run_main_job(bin_dir, screenshot=None):
    """The main job (scripts/main_job.sh's command, with more steps) with
    --ui --quiet: while it trains, the API has every training task's metrics
    from the real hook, with the loss and the progress to its last step;
    stopped with Ctrl-C, it prints only progress lines and how it ended; the
    chief's TensorBoard event file reads back with the independent reader."""
    tmp = tempfile.mkdtemp(prefix="cohort-main-job-page-")
    ckpt = os.path.join(tmp, "checkpoint")
    job = subprocess.Popen(
        [os.path.join(bin_dir, "cohort"), "launch", "--chief", "--workers", "2", "--ps", "1",
         "--ui", "127.0.0.1:0", "--quiet", "--log-dir", os.path.join(tmp, "logs"), "--",
         os.path.join(bin_dir, "train_ps"), "--steps", "1000000", "--checkpoint-dir", ckpt,
         "--save-checkpoint-steps", "1000", "--wait-steps-per-worker", "20",
         # Under a sanitizer the model is smaller (Eigen at -O1 is ~100x
         # slower); the page's mechanics are the same.
         "--hidden", os.environ.get("PAGE_TEST_PS_HIDDEN", "1024")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = Lines(job)
        line = lines.until("job page URL", lambda l: "job page: " in l, 60)
        url = line.split("job page: ", 1)[1].strip()
        base, token = url.split("/?token=")

        def training():
            status, body = api(base, "/api/v1/metrics", token)
            series = body.get("series", {})
            ok = (status == 200 and sorted(series) == ["chief:0", "worker:0", "worker:1"]
                  and all(len(p) >= 2 and p[-1]["loss"] is not None for p in series.values())
                  and body["progress"]["last_step"] == 1000000
                  and body["progress"]["line"].startswith("progress: global step "))
            return ok, body.get("progress")

        progress = wait_for("every training task's metrics on the page", training, 60)
        print("main job progress on the page:", json.dumps(progress))
        status, body = api(base, "/api/v1/tasks", token)
        assert status == 200 and sorted(t["task"] for t in body["tasks"]) == [
            "chief:0", "ps:0", "worker:0", "worker:1"], body
        assert all(t["process"] == "running" and t["pid"] > 0 for t in body["tasks"]), body
        status, log = 0, None
        with urllib.request.urlopen(urllib.request.Request(
                base + "/api/v1/logs/chief:0", headers={"Authorization": "Bearer " + token}),
                timeout=5) as r:
            assert r.status == 200 and "global_step" in r.read().decode()
        if screenshot:
            run_screenshot(url, screenshot)
        # Training would go on for minutes: Ctrl-C ends it (the launcher
        # stops every task and exits 130).
        lines.until("a progress line", lambda l: l.startswith("[cohort] progress: "), 30)
        job.send_signal(signal.SIGINT)
        out = [l.rstrip("\n") for l in lines.rest(120) if l.strip()]
        assert job.wait(timeout=30) == 130, "exit %s:\n%s" % (job.returncode, "\n".join(out))
        # --quiet: the page's URL, progress lines and how the job ended only.
        assert all(l.startswith("[cohort] ") for l in out), out
        assert [l for l in out if not l.startswith("[cohort] progress: global step ")] == [
            out[0], out[-1]], out
        assert "stopped" in out[-1], out
        files = [f for f in os.listdir(ckpt) if f.startswith("events.out.tfevents.")]
        assert len(files) == 1, files
        reader = subprocess.run(
            [sys.executable, os.path.join(HERE, "..", "tensorboard", "read_events.py"),
             os.path.join(ckpt, files[0])], capture_output=True, text=True, check=True)
        events = [json.loads(l) for l in reader.stdout.splitlines()]
        assert events[0]["file_version"] == "brain.Event:2", events[0]
        tags = {t for e in events for t in e.get("summary", {})}
        assert tags == {"loss", "global_step/sec", "examples/sec"}, tags
        steps = [e["step"] for e in events if "loss" in e.get("summary", {})]
        assert steps == sorted(steps) and len(steps) >= 5, steps
        assert any(e.get("session_log") == {"status": 1} for e in events), events[:3]
        print("event file: %d events, loss at %d steps" % (len(events), len(steps)))
        return 0
    finally:
        if job.poll() is None:
            job.terminate()
            job.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


def run_screenshot(url, out):
    tmp = tempfile.mkdtemp(prefix="cohort-page-shot-")
    browser = Browser(tmp)
    try:
        browser.navigate(url)
        wait_for("the page to draw two polls", lambda: (
            int(browser.evaluate("document.querySelectorAll('#chart-step circle.pt').length") or 0) >= 12,
            None), 60)
        # The chief's log open below the charts.
        browser.evaluate("document.querySelector('#tasks tbody tr').click()")
        wait_for("the chief's log", lambda: (
            "global_step" in (browser.evaluate("document.getElementById('log').textContent") or ""),
            None), 10)
        browser.screenshot(out)
    finally:
        browser.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv):
    if len(argv) >= 3 and argv[1] == "--main-job":
        if len(argv) == 4 and shutil.which("chromium") is None:
            print("no chromium on PATH for the screenshot")
            return 1
        return run_main_job(argv[2], argv[3] if len(argv) == 4 else None)
    if len(argv) != 2:
        print(__doc__)
        return 2
    return run_test(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
