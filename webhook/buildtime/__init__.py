"""Build-time code: runs while the project or its image is built, never in the server.

`generate` derives the chart, docs and registry from the rules; `image` assembles the runtime image's
root filesystem and its bill of materials inside the Containerfile's build stage.
"""
