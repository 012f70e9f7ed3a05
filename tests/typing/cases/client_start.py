from _models import Order, signup

from legato.client import Client


async def wrong_input(client: Client) -> None:
    # E: Input to workflow "signup" has incompatible type "Order"; expected "Signup"
    await client.start(signup, Order(order_id="1"))
