"""webui_browser.py - the browser half of test_server_webui.sh: drives the web chat of a
running `tern serve` (the embedded model) in headless Chromium through selenium.

Usage: webui_browser.py URL ARTIFACT_DIR MARKDOWN(1|0)
Every wait is on a state (WebDriverWait on the DOM, or /slots), never a fixed sleep.
The markdown the page renders comes from a grammar in the page's "extra request fields",
so the model's reply is a known text; the expectations below are written by hand.
"""
import json
import re
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

url, art, markdown = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
fails = 0


def check(name, cond, info=""):
    global fails
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f"  [{info}]"), flush=True)
    if not cond:
        fails += 1
    return cond


def get_json(path):
    return json.load(urllib.request.urlopen(url + path, timeout=10))


def gbnf(text):
    """A grammar whose only sentence is text."""
    esc = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'root ::= "{esc}"'


MD = ("# Title\n\nSome **bold** text and `code`.\n\n```python\ndef f(x):\n    return x\n```\n\n"
      "<img src=x onerror=\"window.__xss=1\"> <b>raw</b>\n")

o = webdriver.ChromeOptions()
for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"]:
    o.add_argument(a)
o.binary_location = "/usr/bin/chromium"
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)


def wait(cond, timeout=30):
    try:
        return WebDriverWait(d, timeout, poll_frequency=0.05).until(lambda _: cond())
    except TimeoutException:
        return None


def q(sel, root=None):
    return (root or d).find_elements(By.CSS_SELECTOR, sel)


def assistants():
    return q("#log .msg.assistant")


def last_done():
    """the last reply once it is finished"""
    a = assistants()
    return a[-1] if a and a[-1].get_attribute("data-done") == "1" else None


def load():
    d.get(url + "/")
    wait(lambda: d.find_element(By.TAG_NAME, "body").get_attribute("data-props") in ("loaded", "failed"))


def open_settings():
    s = d.find_element(By.ID, "settings")
    if not s.get_attribute("open"):
        s.find_element(By.TAG_NAME, "summary").click()
        wait(lambda: d.find_element(By.ID, "temperature").is_displayed())


def set_val(id_, v):
    open_settings()
    e = d.find_element(By.ID, id_)
    e.send_keys(Keys.CONTROL, "a")
    e.send_keys(Keys.DELETE)
    if v != "":
        e.send_keys(str(v))


def set_extra(obj):
    open_settings()
    e = d.find_element(By.ID, "extra")
    e.send_keys(Keys.CONTROL, "a")
    e.send_keys(Keys.DELETE)
    if obj is not None:
        e.send_keys(json.dumps(obj))


def send(text):
    n = len(assistants())
    d.find_element(By.ID, "input").send_keys(text)
    d.find_element(By.ID, "send").click()
    wait(lambda: len(assistants()) > n, 10)
    return wait(last_done, 120)


def metric(name):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    m = re.search(r"^" + re.escape(name) + r" ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else None


def slots_idle(timeout):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if not any(s["is_processing"] for s in get_json("/slots")):
            return time.time() - t0
        time.sleep(0.05)   # polling the server's state up to a deadline
    return None


try:
    d.set_page_load_timeout(30)
    d.set_script_timeout(10)
    load()
    d.execute_script("localStorage.clear(); sessionStorage.clear();")
    load()
    check("the page read /props", d.find_element(By.TAG_NAME, "body").get_attribute("data-props") == "loaded")

    # ---- settings come from /props
    props = get_json("/props")
    g = props["default_generation_settings"]
    open_settings()
    shown = {k: d.find_element(By.ID, k).get_attribute("value") for k in
             ["temperature", "top_p", "top_k", "min_p", "repeat_penalty", "repeat_last_n",
              "frequency_penalty", "presence_penalty", "max_tokens"]}
    same = all(shown[k] != "" and abs(float(shown[k]) - g[k]) < 1e-5 * max(1, abs(g[k])) for k in shown)
    check("the settings show /props' default_generation_settings", same, (shown, g))
    check("the settings show the serve flags (--top-k 33, --repeat-penalty 1)",
          shown["top_k"] == "33" and float(shown["repeat_penalty"]) == 1.0, shown)
    check("the thinking box follows /props' thinking_default",
          d.find_element(By.ID, "thinking").is_selected() == props["thinking_default"], props["thinking_default"])
    set_val("temperature", 0)
    load()
    open_settings()
    t = d.find_element(By.ID, "temperature")
    check("a changed setting survives a reload", t.get_attribute("value") == "0" and "overridden" in t.get_attribute("class"),
          t.get_attribute("value"))
    d.find_element(By.ID, "reset").click()
    check("Reset brings the server's defaults back",
          abs(float(d.find_element(By.ID, "temperature").get_attribute("value")) - g["temperature"]) < 1e-5,
          d.find_element(By.ID, "temperature").get_attribute("value"))
    set_val("temperature", 0)

    # ---- a reply in markdown, rendered as it streams
    set_val("max_tokens", 300)
    set_extra({"grammar": gbnf(MD)})
    m = send("Show me some markdown")
    check("the markdown reply finished", m is not None)
    if m is not None and markdown:
        c = m.find_element(By.CSS_SELECTOR, ".content")
        h1 = q("h1", c)
        check("markdown: the heading renders", len(h1) == 1 and h1[0].text == "Title", c.get_attribute("innerHTML")[:300])
        check("markdown: bold renders", [e.text for e in q("strong", c)] == ["bold"])
        check("markdown: inline code renders", "code" in [e.text for e in q(":not(pre) > code", c)])
        code = q("pre code", c)
        kw = [e.text for e in q("pre code .hljs-keyword", c)]
        check("markdown: the code block is highlighted (python)",
              len(code) == 1 and "hljs" in code[0].get_attribute("class") and "def" in kw and "return" in kw,
              (kw, code[0].get_attribute("outerHTML")[:300] if code else None))
        check("model text with HTML: shown as text", "<img src=x onerror" in c.text and "<b>raw</b>" in c.text, c.text)
        check("model text with HTML: no element made of it", not q("img, b, script", c))
    elif m is not None:
        c = m.find_element(By.CSS_SELECTOR, ".content")
        check("without marked: the reply is plain text", c.text.startswith("# Title") and not q("h1", c), c.text[:80])
    check("model text with HTML: nothing ran", d.execute_script("return window.__xss === undefined"))
    st = m.find_element(By.CSS_SELECTOR, ".stats").text if m is not None else ""
    mt = re.search(r"(\d+) tokens · ([\d.]+) tok/s", st)
    check("tokens/s shown", mt is not None and int(mt.group(1)) > 0 and float(mt.group(2)) > 0, st)
    d.save_screenshot(f"{art}/webui_markdown.png")

    # ---- regenerate: the reply is asked for again (another grammar: another text)
    set_extra({"grammar": gbnf("# Second\n")})
    assistants()[-1].find_element(By.CSS_SELECTOR, "button.regenerate").click()
    m = wait(lambda: (lambda a: a if a is not None and "Second" in a.text else None)(last_done()), 120)
    check("regenerate replaces the reply", m is not None and len(assistants()) == 1 and len(q("#log .msg.user")) == 1,
          [a.text for a in assistants()])

    # ---- edit the question: it is replaced and answered again
    set_extra({"grammar": gbnf("# Third\n")})
    q("#log .msg.user")[0].find_element(By.CSS_SELECTOR, "button.edit").click()
    box = wait(lambda: q("#log .msg.user .edit-box textarea"), 5)
    box[0].clear()
    box[0].send_keys("An edited question")
    q("#log .msg.user .edit-box button.save")[0].click()
    m = wait(lambda: (lambda a: a if a is not None and "Third" in a.text else None)(last_done()), 120)
    users = [e.find_element(By.CSS_SELECTOR, ".content").text for e in q("#log .msg.user")]
    check("edit replaces the question and its reply", m is not None and users == ["An edited question"]
          and len(assistants()) == 1, (users, [a.text for a in assistants()]))

    # ---- copy
    try:
        d.execute_cdp_cmd("Browser.grantPermissions", {"origin": url, "permissions": ["clipboardReadWrite",
                                                                                      "clipboardSanitizedWrite"]})
    except Exception as e:                       # noqa: BLE001 - an older driver: data-copied is checked alone
        print(f"note: clipboard permissions not granted ({e})")
    b = assistants()[-1].find_element(By.CSS_SELECTOR, "button.copy")
    b.click()
    check("copy: the button reports it", wait(lambda: b.get_attribute("data-copied") == "1", 5) is not None)
    clip = d.execute_async_script("const done = arguments[0];"
                                  "navigator.clipboard.readText().then(done, (e) => done('ERR ' + e));")
    check("copy: the reply's markdown is on the clipboard", clip.strip() == "# Third", clip)

    # ---- the conversation survives a reload
    before = [(e.get_attribute("class"), e.find_element(By.CSS_SELECTOR, ".content").text) for e in q("#log .msg")]
    load()
    wait(lambda: len(q("#log .msg")) == len(before), 10)
    after = [(e.get_attribute("class"), e.find_element(By.CSS_SELECTOR, ".content").text) for e in q("#log .msg")]
    check("a conversation survives a reload", before == after and len(before) == 2, (before, after))
    if markdown:
        check("after the reload the reply is rendered again", [e.text for e in q("#log .msg.assistant h1")] == ["Third"])

    # ---- a stored conversation with thinking and hostile text (put into localStorage)
    hostile = ("Look: <script>window.__xss=2</script> and <img src=x onerror=\"window.__xss=3\">\n\n"
               "[a link](javascript:window.__xss=4) [ok](https://example.invalid/)\n\n"
               "![pic](https://example.invalid/p.png)\n\n<iframe src=\"javascript:window.__xss=5\"></iframe>")
    d.execute_script("""
        const s = JSON.parse(localStorage.getItem('tern.chat.v1'));
        s.convs.push({id: 'injected', title: 'Injected', created: Date.now(), updated: Date.now() + 1000, system: '',
                      messages: [{role: 'user', content: 'Why?'},
                                 {role: 'assistant', content: arguments[0], reasoning: 'Because I thought so.'}]});
        s.current = 'injected';
        localStorage.setItem('tern.chat.v1', JSON.stringify(s));""", hostile)
    load()
    wait(lambda: len(assistants()) == 1, 10)
    a = assistants()[0]
    th = q(".thinking", a)
    body = q(".thinking .thinking-body", a)
    check("thinking: a folded section", len(th) == 1 and th[0].get_attribute("open") is None and body
          and not body[0].is_displayed())
    if th:
        th[0].find_element(By.TAG_NAME, "summary").click()
        check("thinking: it unfolds", wait(lambda: body[0].is_displayed() and body[0].text == "Because I thought so.", 5)
              is not None)
        th[0].find_element(By.TAG_NAME, "summary").click()
        check("thinking: it folds again", wait(lambda: not body[0].is_displayed(), 5) is not None)
    c = a.find_element(By.CSS_SELECTOR, ".content")
    check("stored HTML: nothing ran", d.execute_script("return window.__xss === undefined"))
    check("stored HTML: no script, img or iframe element", not q("script, img, iframe", c), c.get_attribute("innerHTML"))
    check("stored HTML: shown as text", "<script>window.__xss=2</script>" in c.text, c.text)
    if markdown:
        hrefs = [e.get_attribute("href") for e in q("a", c)]
        check("links: javascript: loses its href, https keeps it",
              hrefs.count(None) == 1 and "https://example.invalid/" in hrefs
              and not any(h and h.startswith("javascript") for h in hrefs), hrefs)

    # ---- the list: two conversations, switch, delete
    titles = [e.text for e in q("#convs .conv .title")]
    check("the list shows both conversations", titles == ["Injected", "An edited question"], titles)
    q("#convs .conv .title")[1].click()
    check("switch: the other conversation shows",
          wait(lambda: [e.text for e in q("#log .msg.user .content")] == ["An edited question"], 5) is not None)
    inj = [li for li in q("#convs .conv") if li.get_attribute("data-id") == "injected"][0]
    inj.find_element(By.CSS_SELECTOR, ".delete").click()
    WebDriverWait(d, 5).until(lambda _: d.switch_to.alert).accept()
    check("delete: it leaves the list", wait(lambda: [e.text for e in q("#convs .conv .title")] == ["An edited question"], 5)
          is not None)
    d.find_element(By.ID, "new").click()
    check("new: an empty conversation", wait(lambda: not q("#log .msg") and len(q("#convs .conv")) == 2, 5) is not None)

    # ---- the system prompt: sent first (the server counts more prompt tokens), kept per conversation
    def prompt_tokens(msg):
        mt = re.search(r"prompt (\d+) tokens", msg.find_element(By.CSS_SELECTOR, ".stats").text) if msg else None
        return int(mt.group(1)) if mt else None

    def set_system(text):
        if not d.find_element(By.ID, "system-box").get_attribute("open"):
            d.find_element(By.CSS_SELECTOR, "#system-box summary").click()
        e = d.find_element(By.ID, "system")
        e.send_keys(Keys.CONTROL, "a")
        e.send_keys(Keys.DELETE)
        if text:
            e.send_keys(text)

    set_extra({"grammar": gbnf("ok")})
    p0 = prompt_tokens(send("Hi"))
    d.find_element(By.ID, "new").click()
    wait(lambda: not q("#log .msg"), 5)
    system = "You are a terse assistant who answers in one word."
    set_system(system)
    p1 = prompt_tokens(send("Hi"))
    check("system prompt: sent with the request", p0 is not None and p1 is not None and p1 > p0 + 5, (p0, p1))
    load()
    check("system prompt: kept with its conversation",
          wait(lambda: d.find_element(By.ID, "system").get_attribute("value") == system, 5) is not None)
    d.find_element(By.ID, "new").click()
    wait(lambda: not q("#log .msg"), 5)
    check("system prompt: a new conversation starts with the last one",
          d.find_element(By.ID, "system").get_attribute("value") == system)
    set_system("")

    # ---- thinking, live: the box (changed from /props' default) turns it on for the request
    set_extra(None)
    set_val("max_tokens", 16)
    box = d.find_element(By.ID, "thinking")
    box.click()
    check("thinking: the box is changed", box.is_selected() != props["thinking_default"])
    m = send("Hi")
    if not props["thinking_default"] and m is not None:
        th = q(".thinking", m)[0]
        rb = th.find_element(By.CSS_SELECTOR, ".thinking-body")
        content = m.find_element(By.CSS_SELECTOR, ".content").text
        check("thinking: the reply's reasoning streams into the section", th.is_displayed() and rb.get_attribute(
            "textContent").strip() != "", rb.get_attribute("textContent")[:80])
        # open while only thinking came; folded once an answer started
        check("thinking: open while thinking, folded once the answer starts",
              (th.get_attribute("open") is not None) == (content == ""), (content[:80], th.get_attribute("open")))
    box.click()
    d.find_element(By.ID, "new").click()
    wait(lambda: not q("#log .msg"), 5)

    # ---- Stop: a long reply stopped mid-way frees the slot
    set_val("max_tokens", 4000)
    gen0 = metric("tern_generated_tokens_total")
    d.find_element(By.ID, "input").send_keys("Tell me a long story")
    d.find_element(By.ID, "send").click()
    wait(lambda: len(assistants()) == 1, 10)
    grown = wait(lambda: len(assistants()[-1].find_element(By.CSS_SELECTOR, ".content").text) > 40, 60)
    check("the long reply streams", grown is not None)
    d.find_element(By.ID, "stop").click()
    m = wait(last_done, 10)
    check("Stop ends the reply, marked stopped", m is not None and m.get_attribute("data-stopped") == "1")
    idle = slots_idle(10)
    check("the stopped request's slot is idle again", idle is not None, get_json("/slots"))
    text = m.find_element(By.CSS_SELECTOR, ".content").text if m is not None else ""
    # unstopped, this greedy reply runs to the end of the context (--ctx 2048: ~2,000 tokens)
    gen = metric("tern_generated_tokens_total") - gen0 if gen0 is not None else None
    check(f"the server stopped generating it ({gen} tokens, far short of ~2,000)", gen is not None and gen < 1500, gen)
    check("the stopped reply no longer grows",
          m is not None and m.find_element(By.CSS_SELECTOR, ".content").text == text
          and d.find_element(By.ID, "send").is_enabled() and not d.find_element(By.ID, "stop").is_enabled())
    load()
    m = wait(lambda: assistants() and assistants()[-1], 10)
    check("the stopped reply is kept, marked stopped, after a reload",
          m and m.get_attribute("data-stopped") == "1" and m.find_element(By.CSS_SELECTOR, ".content").text == text)
    d.save_screenshot(f"{art}/webui.png")
    print(f"screenshot: {art}/webui.png")
    errors = [e["message"] for e in d.get_log("browser") if e["level"] == "SEVERE"
              and "Failed to load resource" not in e["message"]]
    check("no script error in the page's console", not errors, errors)
finally:
    d.quit()
sys.exit(1 if fails else 0)
