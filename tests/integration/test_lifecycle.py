def test_smoke(client):
    """The daemon answers."""
    assert client.get("/healthz").status == 200
