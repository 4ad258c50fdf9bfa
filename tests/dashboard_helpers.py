"""Signing a test client in to the dashboard, and reading the tokens its pages carry."""
import re

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    return CSRF_FIELD.search(html).group(1)


def sign_in(client, key, base_url="http://localhost"):
    """Sign `client` in with `key` through the form (of the site at `base_url`); returns the sign-in response."""
    page = client.get("/login", base_url=base_url)
    return client.post("/login", base_url=base_url,
                       data={"api_key": key, "csrf_token": csrf_of(page.get_data(as_text=True))})


class Browser:
    """A signed-in test client: `get` returns the page's text, `post` sends a form with the page's CSRF token."""

    def __init__(self, app, key):
        self.client = app.test_client()
        response = sign_in(self.client, key)
        assert response.status_code == 302, response.get_data(as_text=True)
        self.csrf = csrf_of(self.client.get("/").get_data(as_text=True))

    def get(self, path, **kwargs):
        return self.client.get(path, **kwargs)

    def text(self, path) -> str:
        response = self.client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        return response.get_data(as_text=True)

    def post(self, path, data=None, **kwargs):
        return self.client.post(path, data={"csrf_token": self.csrf, **(data or {})}, **kwargs)
