"""Wire formats of the drop-in endpoints and the canonical form (Anthropic Messages) they map onto.

Pure: dicts in, dicts out. One module per format (`responses`, `chat`), each a request converter
(the client's body -> a canonical body the proxy use case reconciles and stores), an upstream builder
(the served canonical prompt -> the request the format's upstream takes) and a stream relay
(`*_relay`). `tags` holds what a canonical text block may carry for a format that has more roles or
item kinds than the canonical form (docs/proxy.md, "OpenAI formats").
"""
