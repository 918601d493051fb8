"""A realistic guarded request: a retail-style agent turn with eight tools, and its answer."""

from __future__ import annotations

from typing import Any

import orjson


def _tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"{name.replace('_', ' ').capitalize()}.",
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}}}


STRING = {"type": "string"}
TOOLS = [
    _tool("find_user_id_by_email", {"email": STRING}, ["email"]),
    _tool("find_user_id_by_name_zip", {"first_name": STRING, "last_name": STRING,
                                       "zip": STRING}, ["first_name", "last_name", "zip"]),
    _tool("get_order_details", {"order_id": STRING}, ["order_id"]),
    _tool("get_product_details", {"product_id": STRING}, ["product_id"]),
    _tool("get_user_details", {"user_id": STRING}, ["user_id"]),
    _tool("cancel_pending_order", {"order_id": STRING, "reason": {
        "type": "string", "enum": ["no longer needed", "ordered by mistake"]}},
        ["order_id", "reason"]),
    _tool("return_delivered_order_items", {"order_id": STRING, "item_ids": {
        "type": "array", "items": STRING}, "payment_method_id": STRING},
        ["order_id", "item_ids", "payment_method_id"]),
    _tool("transfer_to_human_agents", {"summary": STRING}, ["summary"]),
]

REQUEST = {
    "model": "bench-model",
    "messages": [
        {"role": "system", "content": "You are a retail customer-service agent. " * 20},
        {"role": "user", "content": "Hi, I want to cancel order #W2378156, I ordered it by "
                                    "mistake. My email is yusuf.rossi@example.com."},
    ],
    "tools": TOOLS,
    "temperature": 0,
}

ANSWER = {
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000,
    "model": "bench-model", "system_fingerprint": "simulated",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [{
            "id": "call_bench", "type": "function", "function": {
                "name": "cancel_pending_order",
                "arguments": '{"order_id": "#W2378156", "reason": "ordered by mistake"}'}}]}}],
    "usage": {"prompt_tokens": 900, "completion_tokens": 30, "total_tokens": 930},
}

REQUEST_BYTES = orjson.dumps(REQUEST)
ANSWER_BYTES = orjson.dumps(ANSWER)


# The request the issue's agents really send (issue 11): tau2's fifteen retail tools, with
# their descriptions and enums, about 10 KB. The answer above is valid against it too.
def _described(name: str, description: str, properties: dict[str, Any],
               required: list[str]) -> dict[str, Any]:
    tool = _tool(name, properties, required)
    tool["function"]["description"] = description
    return tool


def _string(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


ORDER_ID = _string("The order id, such as '#W0000000', with its '#'.", pattern="^#W[0-9]{7}$")
ITEM_IDS = {"type": "array", "items": _string("An item id, such as '1008292230'."),
            "description": "The item ids to be acted on, each at most once.", "minItems": 1}
PAYMENT_ID = _string("The payment method id to pay or refund the price difference, such as "
                     "'gift_card_0000000' or 'credit_card_0000000'.")
ADDRESS = {
    "address1": _string("The first line of the address, such as '123 Main St'."),
    "address2": _string("The second line of the address, such as 'Apt 1' or ''."),
    "city": _string("The city, such as 'San Francisco'."),
    "state": _string("The state, such as 'CA'.", enum=[
        "AZ", "CA", "CO", "FL", "GA", "IL", "MA", "MI", "NC", "NJ", "NY", "OH", "PA", "TX",
        "WA"]),
    "country": _string("The country, such as 'USA'.", enum=["USA"]),
    "zip": _string("The zip code, such as '12345'.", pattern="^[0-9]{5}$"),
}
PRODUCT_TYPES = ["T-Shirt", "Office Chair", "Backpack", "Laptop", "Smart Watch", "Sneakers",
                 "Water Bottle", "Bluetooth Speaker", "Desk Lamp", "Mechanical Keyboard"]
TOOLS_15 = [
    _described("find_user_id_by_email", "Find user id by email. If the user is not found, "
               "the function will return an error message.",
               {"email": _string("The email of the user, such as 'something@example.com'.")},
               ["email"]),
    _described("find_user_id_by_name_zip", "Find user id by first name, last name, and zip "
               "code. If the user is not found, the function will return an error message. "
               "By default, find user id by email, and only call this function if the user "
               "is not found by email or cannot remember email.",
               {"first_name": _string("The first name of the customer, such as 'John'."),
                "last_name": _string("The last name of the customer, such as 'Doe'."),
                "zip": ADDRESS["zip"]}, ["first_name", "last_name", "zip"]),
    _described("get_order_details", "Get the status and details of an order.",
               {"order_id": ORDER_ID}, ["order_id"]),
    _described("get_product_details", "Get the inventory details of a product.",
               {"product_id": _string("The product id, such as '6086499569'. Be careful the "
                                      "product id is different from the item id.")},
               ["product_id"]),
    _described("get_user_details", "Get the details of a user, including their orders.",
               {"user_id": _string("The user id, such as 'sara_doe_496'.")}, ["user_id"]),
    _described("list_all_product_types", "List the name and product id of all product types. "
               "Each product type has a variety of different items with unique item ids and "
               "options. There are only 50 product types in the store.",
               {"category": _string("Only list this category.", enum=PRODUCT_TYPES)}, []),
    _described("cancel_pending_order", "Cancel a pending order. If the order is already "
               "processed or delivered, it cannot be cancelled. The agent needs to explain "
               "the cancellation detail and ask for explicit user confirmation (yes/no) to "
               "proceed. If the user confirms, the order status will be changed to 'cancelled' "
               "and the payment will be refunded. The refund will be added to the user's gift "
               "card balance immediately if the payment was made using a gift card, otherwise "
               "the refund would take 5-7 business days to process.",
               {"order_id": ORDER_ID, "reason": _string(
                   "The reason for cancellation, which should be either 'no longer needed' or "
                   "'ordered by mistake'.", enum=["no longer needed", "ordered by mistake"])},
               ["order_id", "reason"]),
    _described("exchange_delivered_order_items", "Exchange items in a delivered order to new "
               "items of the same product type. For a delivered order, return or exchange can "
               "be only done once by the agent. The agent needs to explain the exchange detail "
               "and ask for explicit user confirmation (yes/no) to proceed.",
               {"order_id": ORDER_ID, "item_ids": ITEM_IDS, "new_item_ids": {
                   **ITEM_IDS, "description": "The item ids to be exchanged for, each such as "
                   "'1008292230'. There could be duplicate items in the list. The new item id "
                   "has to correspond to the same position in item_ids."},
                "payment_method_id": PAYMENT_ID},
               ["order_id", "item_ids", "new_item_ids", "payment_method_id"]),
    _described("return_delivered_order_items", "Return some items of a delivered order. The "
               "order status will be changed to 'return requested'. The agent needs to explain "
               "the return detail and ask for explicit user confirmation (yes/no) to proceed. "
               "The user will receive follow-up email for how and where to return the item.",
               {"order_id": ORDER_ID, "item_ids": ITEM_IDS, "payment_method_id": PAYMENT_ID},
               ["order_id", "item_ids", "payment_method_id"]),
    _described("modify_pending_order_address", "Modify the shipping address of a pending "
               "order. The agent needs to explain the modification detail and ask for explicit "
               "user confirmation (yes/no) to proceed.",
               {"order_id": ORDER_ID, **ADDRESS},
               ["order_id", "address1", "address2", "city", "state", "country", "zip"]),
    _described("modify_pending_order_items", "Modify items in a pending order to new items of "
               "the same product type. For a pending order, this function can only be called "
               "once. The agent needs to explain the exchange detail and ask for explicit user "
               "confirmation (yes/no) to proceed.",
               {"order_id": ORDER_ID, "item_ids": ITEM_IDS, "new_item_ids": ITEM_IDS,
                "payment_method_id": PAYMENT_ID},
               ["order_id", "item_ids", "new_item_ids", "payment_method_id"]),
    _described("modify_pending_order_payment", "Modify the payment method of a pending order. "
               "The agent needs to explain the modification detail and ask for explicit user "
               "confirmation (yes/no) to proceed.",
               {"order_id": ORDER_ID, "payment_method_id": PAYMENT_ID},
               ["order_id", "payment_method_id"]),
    _described("modify_user_address", "Modify the default address of a user. The agent needs "
               "to explain the modification detail and ask for explicit user confirmation "
               "(yes/no) to proceed.",
               {"user_id": _string("The user id, such as 'sara_doe_496'."), **ADDRESS},
               ["user_id", "address1", "address2", "city", "state", "country", "zip"]),
    _described("calculate", "Calculate the result of a mathematical expression.",
               {"expression": _string("The mathematical expression to calculate, such as "
                                      "'2 + 2'. The expression can contain numbers, operators "
                                      "(+, -, *, /), parentheses, and spaces.")},
               ["expression"]),
    _described("transfer_to_human_agents", "Transfer the user to a human agent, with a summary "
               "of the user's issue. Only transfer if the user explicitly asks for a human "
               "agent, or if the user's issue cannot be resolved by the agent with the "
               "available tools.",
               {"summary": _string("A summary of the user's issue."),
                "priority": _string("How urgent the issue is.", enum=["low", "normal", "high"])},
               ["summary"]),
]
REQUEST_15 = {**REQUEST, "tools": TOOLS_15}
REQUEST_15_BYTES = orjson.dumps(REQUEST_15)
# workload name -> (tools, request bytes): bench.overhead --tools
TOOL_WORKLOADS: dict[str, tuple[list[dict[str, Any]], bytes]] = {
    "8": (TOOLS, REQUEST_BYTES),
    "15": (TOOLS_15, REQUEST_15_BYTES),
}


def _history(calls: int) -> list[dict[str, Any]]:
    """An agent's replayed history (issue 22): `calls` earlier turns, each a valid call and its
    result, with a user turn after every second one: 2*calls + calls//2 messages."""
    turns: list[dict[str, Any]] = []
    for index in range(calls):
        turns.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_h{index}", "type": "function", "function": {
                "name": "get_order_details",
                "arguments": f'{{"order_id": "#W{2378100 + index}"}}'}}]})
        turns.append({"role": "tool", "tool_call_id": f"call_h{index}",
                      "content": f'{{"order_id": "#W{2378100 + index}", "status": "pending", '
                                 '"items": [{"item_id": "1008292230", "price": 54.04}]}'})
        if index % 2 == 1:
            turns.append({"role": "user", "content": "And the next one?"})
    return turns


# The 8-tool request after a 20-turn history holding 10 valid historical calls: what history
# hygiene (dialects/history.py) reads on every turn of a long conversation.
_MESSAGES: list[dict[str, Any]] = REQUEST["messages"]  # type: ignore[assignment]
HISTORY_REQUEST = {**REQUEST, "messages": [*_MESSAGES[:1], *_history(10), *_MESSAGES[1:]]}
HISTORY_REQUEST_BYTES = orjson.dumps(HISTORY_REQUEST)
TOOL_WORKLOADS["8+h"] = (TOOLS, HISTORY_REQUEST_BYTES)
