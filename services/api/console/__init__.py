"""The debugging console: a browser app over the public API, served by the API itself.

`GET /` is its page; `/console/…` its modules, styles and vendored libraries (each with its
licence under `static/vendor/`). No build step and nothing fetched from elsewhere: the
files under `static/` are what the browser runs.
"""
