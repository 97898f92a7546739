"""What runs in the server process: the aiohttp transport (both ports), the review routes'
handler, TLS and certificate reloading, the config and cluster-version watchers, metrics and logs.
`server` puts them together; webhook.serve.process runs one process (signals, drain), webhook.serve.workers N of them.
"""
