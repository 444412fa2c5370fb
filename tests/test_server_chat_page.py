"""The chat page at `/` in headless Chromium (Debian's chromium + chromium-driver, driven by
selenium): it loads with no external resources, streams a reply, shows tokens/s, and the
test saves a screenshot to build/test-artifacts/chat_page.png."""
import re
import shutil

import pytest

from conftest import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM or not DRIVER:
        pytest.skip("chromium / chromium-driver not installed (setup.sh installs them)")
    webdriver = pytest.importorskip("selenium.webdriver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,800"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=opts)
    yield driver
    driver.quit()


def test_chat_page_streams_a_reply(zen_server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(zen_server.url + "/")
    wait = WebDriverWait(browser, 120)
    wait.until(lambda d: d.find_element(By.ID, "model").text == zen_server.model)
    # Self-contained: the page loaded nothing but itself.
    resources = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert all(r.startswith(zen_server.url) for r in resources), resources
    browser.find_element(By.ID, "temperature").clear()
    browser.find_element(By.ID, "temperature").send_keys("0")
    browser.find_element(By.ID, "max_tokens").clear()
    browser.find_element(By.ID, "max_tokens").send_keys("24")
    browser.find_element(By.ID, "input").send_keys("Write a haiku about compilers.")
    browser.find_element(By.ID, "send").click()
    wait.until(lambda d: "tokens/s" in d.find_element(By.ID, "stats").text
               and "generating" not in d.find_element(By.ID, "stats").text)
    replies = browser.find_elements(By.CSS_SELECTOR, ".msg.assistant .content")
    assert replies and replies[-1].text.strip()
    expected = zen_server.client().chat.completions.create(
        model=zen_server.model, messages=[{"role": "user", "content": "Write a haiku about compilers."}],
        max_tokens=24, temperature=0).choices[0].message.content
    assert replies[-1].text.strip() == expected.strip()
    assert re.match(r"\d+ tokens · [\d.]+ tokens/s · first token [\d.]+ s$", browser.find_element(By.ID, "stats").text)
    # Reasoning is collapsed by default (hidden when the reply has none).
    details = browser.find_elements(By.CSS_SELECTOR, ".msg.assistant details")
    assert details and not details[-1].get_attribute("open")
    out = ROOT / "build" / "test-artifacts"
    out.mkdir(parents=True, exist_ok=True)
    shot = out / "chat_page.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
