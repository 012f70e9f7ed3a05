"""The examples' workflows in one app, for the ``legato dev`` the browser test runs."""

from examples.orders import orders
from examples.signup import signup
from legato import App

app = App(workflows=[signup, orders])
