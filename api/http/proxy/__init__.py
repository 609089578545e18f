"""The drop-in endpoints: one proxy flow, one thin edge per wire format (docs/proxy.md).

- `flow`: the use case every format shares: the request stored and served (`reconcile`: its
  history reconciled with its session, the upstream request built from the ready prompt, served
  ahead of its commit in the usual case), the upstream call (`call`: the tenant's or the
  deployment's upstream, its errors, the streamed response), its stream relayed round after round
  with compactd's own tool calls answered in between, the reply recorded;
- `formats`: what differs per format (the upstream request, the relay, the error shape):
  Anthropic Messages, OpenAI Responses, OpenAI Chat Completions;
- `auth`: who is calling and which provider key goes upstream;
- `messages`, `openai`: the routes, each a few hundred lines that parse, name the conversation and
  call the flow; `provider_keys`: the routes that hold a tenant's provider keys.
"""
