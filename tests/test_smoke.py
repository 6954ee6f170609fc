async def test_healthz(server):
    r = await server.client.get("/healthz")
    assert r.status == 200 and r.data == {"status": "ok"}
