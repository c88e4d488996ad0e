"""Make a published asv site self-contained: its CDN libraries served from the site.

asv 0.6's ``index.html`` loads jQuery, flot, bootstrap and three small
plugins from CDNs; a GPU runner, or the machine that opens the site, may have
no internet, and then asv shows only its "external dependencies failed to
load" page. :func:`make_offline` copies local copies of those files
(``tools/site_vendor/``: the same versions, MIT-licensed, see its README) into
the site's ``vendor/`` folder and points ``index.html`` at them. Where a copy
is byte-identical to the CDN's file its integrity check stays; for the others
(flot and stupidtable, which the CDN minified itself) that tag's
``integrity`` attribute is dropped.
"""

from __future__ import annotations

import base64
import hashlib
import pathlib
import re
import shutil

VENDOR_DIR = pathlib.Path(__file__).resolve().parent / "site_vendor"
CDNJS = "https://cdnjs.cloudflare.com/ajax/libs/"
VENDOR = {  # address in asv 0.6's index.html -> local copy
    "https://code.jquery.com/jquery-3.3.1.min.js": "jquery-3.3.1.min.js",
    CDNJS + "flot/0.8.3/jquery.flot.min.js": "jquery.flot.js",
    CDNJS + "flot/0.8.3/jquery.flot.time.min.js": "jquery.flot.time.js",
    CDNJS + "flot/0.8.3/jquery.flot.selection.min.js": "jquery.flot.selection.js",
    CDNJS + "flot/0.8.3/jquery.flot.categories.min.js": "jquery.flot.categories.js",
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": "jquery.flot.orderBars.js",
    CDNJS + "stupidtable/1.0.1/stupidtable.min.js": "stupidtable.min.js",
    CDNJS + "blueimp-md5/2.19.0/js/md5.min.js": "md5.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": "bootstrap.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": "bootstrap.min.css",
}
TAG = re.compile(r"<(?:script|link)\b[^>]*>")
ADDRESS = re.compile(r'\s(?:src|href)="([^"]+)"')
INTEGRITY = re.compile(r'\sintegrity="(\w+)-([^"]+)"')


def _digest(path: pathlib.Path, algorithm: str) -> str:
    return base64.b64encode(hashlib.new(algorithm, path.read_bytes()).digest()).decode()


def make_offline(html_dir: pathlib.Path) -> list[str]:
    """Point ``html_dir/index.html`` at local copies of its CDN files (copied to ``html_dir/vendor/``).

    Returns the http(s) addresses that still load from outside: none with
    asv 0.6.6; a newer asv that adds or moves one needs its copy in
    ``tools/site_vendor/`` and a line in VENDOR. Idempotent.
    """
    index = pathlib.Path(html_dir) / "index.html"
    vendor = index.parent / "vendor"
    vendor.mkdir(exist_ok=True)

    def localize(tag: re.Match) -> str:
        text = tag.group(0)
        address = ADDRESS.search(text)
        if not address or address.group(1) not in VENDOR:
            return text
        local = VENDOR_DIR / VENDOR[address.group(1)]
        shutil.copy2(local, vendor / local.name)
        sri = INTEGRITY.search(text)
        if sri and _digest(local, sri.group(1)) != sri.group(2):
            text = text.replace(sri.group(0), "")
        return text.replace(address.group(1), f"vendor/{local.name}")

    html = TAG.sub(localize, index.read_text())
    index.write_text(html)
    return sorted({a for tag in TAG.findall(html) for a in ADDRESS.findall(tag) if re.match(r"https?://", a)})


if __name__ == "__main__":
    raise SystemExit("tools/site_offline.py is a module of the tracker's command line: python tools/bench.py --help")
