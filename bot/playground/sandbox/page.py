"""The sandbox page, `page.html` beside this module: plain HTML, a little CSS and vanilla JS (no framework, no
external requests).

Everything user-, tool- or model-written is put in the DOM with textContent, never innerHTML.
"""

from importlib.resources import files

PAGE = files(__package__).joinpath("page.html").read_text(encoding="utf-8")
