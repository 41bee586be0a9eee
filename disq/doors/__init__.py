"""Sans-IO doors: one connection's protocol commands applied to the cores; no sockets,
no asyncio."""
