"""extender: Volcano's HTTP extender plugin (the plugin in `plugin`, the synchronous HTTP client in
`client`, the request views and the answers' typed structs in `wire`; the protocol in docs/extender.md)."""

from busched.plugins.extender.plugin import ExtenderPlugin

__all__ = ["ExtenderPlugin"]
