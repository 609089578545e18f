"""The drop-in endpoints: one proxy flow, one thin edge per wire format (docs/proxy.md).

- `flow`: the use case every format shares: reconcile the request's history with its session,
  serve the ready prompt, call upstream, stream the answer back through the format's relay with
  compactd's own tool rounds answered in between, record the reply;
- `formats`: what differs per format (the upstream request, the relay, the next round's request,
  the error shape): Anthropic Messages, OpenAI Responses, OpenAI Chat Completions;
- `auth`: who is calling and which provider key goes upstream;
- `messages`, `openai`: the routes, each a few lines that parse, name the conversation and call
  the flow; `provider_keys`: the routes that hold a tenant's provider keys.
"""
