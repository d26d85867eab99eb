"""engram inside agent frameworks. Each integration is its own module and imports its framework
only when used; ``import engram`` imports none of them.

- :mod:`engram.integrations.agents`: ``EngramSession``, the OpenAI Agents SDK's ``Session`` on an
  engram session (``pip install "engram[agents]"``).
- :mod:`engram.integrations.langchain`: ``EngramMiddleware``, LangChain 1.x agent middleware that
  sends the model engram's view while the graph's state keeps every message
  (``pip install "engram[langchain]"``).
"""
