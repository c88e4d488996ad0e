"""tools/site_offline.py: the published site's CDN files served from the site itself."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import site_offline  # noqa: E402

JQUERY = "https://code.jquery.com/jquery-3.3.1.min.js"
FLOT = site_offline.CDNJS + "flot/0.8.3/jquery.flot.min.js"
INDEX = f"""<html><head>
<script src="{JQUERY}" integrity="sha256-{site_offline._digest(site_offline.VENDOR_DIR / 'jquery-3.3.1.min.js', 'sha256')}"
 crossorigin="anonymous"></script>
<script src="{FLOT}" integrity="sha512-notthecdnminifiedfile" crossorigin="anonymous"></script>
<script src="https://example.org/new-in-a-later-asv.js"></script>
<script src="asv.js"></script>
</head><body><a href="https://github.com/airspeed-velocity/asv/">asv</a></body></html>"""


def test_cdn_files_are_served_from_the_site(tmp_path):
    (tmp_path / "index.html").write_text(INDEX)
    left = site_offline.make_offline(tmp_path)
    html = (tmp_path / "index.html").read_text()
    # Known CDN files now load from vendor/, copied there byte for byte.
    assert JQUERY not in html and FLOT not in html
    for name in ("jquery-3.3.1.min.js", "jquery.flot.js"):
        assert f'src="vendor/{name}"' in html
        assert (tmp_path / "vendor" / name).read_bytes() == (site_offline.VENDOR_DIR / name).read_bytes()
    # An identical copy keeps its integrity check; a different one loses it (and only it).
    assert 'src="vendor/jquery-3.3.1.min.js" integrity="sha256-' in html
    assert "notthecdnminifiedfile" not in html and 'src="vendor/jquery.flot.js" crossorigin="anonymous"' in html
    # What has no local copy is reported; plain links are not loads.
    assert left == ["https://example.org/new-in-a-later-asv.js"]
    assert 'src="asv.js"' in html


def test_making_a_site_offline_twice_changes_nothing(tmp_path):
    (tmp_path / "index.html").write_text(INDEX)
    site_offline.make_offline(tmp_path)
    once = (tmp_path / "index.html").read_text()
    site_offline.make_offline(tmp_path)
    assert (tmp_path / "index.html").read_text() == once
