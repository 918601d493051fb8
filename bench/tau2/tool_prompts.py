"""A fixed set of single-turn tool-calling prompts in the style of retail and telecom support.

Written for reflexguard: 34 requests over two realistic tool sets. They exercise the
choices a small quantized model gets wrong: required enums, arrays, numbers, ids it
must copy from the user rather than invent.
"""

from __future__ import annotations

from typing import Any


def _tool(name: str, description: str, properties: dict[str, Any],
          required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}}}


def _s(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


RETAIL_TOOLS = [
    _tool("find_user_id_by_email", "Find a user id by email.",
          {"email": _s("The user's email, such as 'something@example.com'.")}, ["email"]),
    _tool("get_order_details", "Get the status and details of an order.",
          {"order_id": _s("The order id, such as '#W0000000'.")}, ["order_id"]),
    _tool("cancel_pending_order", "Cancel a pending order.",
          {"order_id": _s("The order id, such as '#W0000000'."),
           "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"],
                      "description": "The reason for cancellation."}},
          ["order_id", "reason"]),
    _tool("return_delivered_order_items", "Return some items of a delivered order.",
          {"order_id": _s("The order id, such as '#W0000000'."),
           "item_ids": {"type": "array", "items": {"type": "string"},
                        "description": "The item ids to return."},
           "payment_method_id": _s("Where the refund goes, such as 'gift_card_0000000'.")},
          ["order_id", "item_ids", "payment_method_id"]),
    _tool("get_product_details", "Get the inventory details of a product.",
          {"product_id": _s("The product id, such as '6086499569'.")}, ["product_id"]),
]

TELECOM_TOOLS = [
    _tool("get_customer_by_phone", "Find a customer by phone number.",
          {"phone_number": _s("The phone number, such as '555-123-2002'.")}, ["phone_number"]),
    _tool("get_data_usage", "Get the data usage of a line in the current cycle.",
          {"customer_id": _s("The customer id, such as 'C1001'."),
           "line_id": _s("The line id, such as 'L1001'.")}, ["customer_id", "line_id"]),
    _tool("suspend_line", "Suspend a line.",
          {"customer_id": _s("The customer id."), "line_id": _s("The line id."),
           "reason": {"type": "string", "enum": ["lost device", "travel", "other"]}},
          ["customer_id", "line_id", "reason"]),
    _tool("enable_roaming", "Enable international roaming on a line.",
          {"customer_id": _s("The customer id."), "line_id": _s("The line id.")},
          ["customer_id", "line_id"]),
    _tool("refuel_data", "Add data to a line.",
          {"customer_id": _s("The customer id."), "line_id": _s("The line id."),
           "gb_amount": {"type": "number", "minimum": 0.5, "maximum": 10,
                         "description": "Gigabytes to add."}},
          ["customer_id", "line_id", "gb_amount"]),
]

RETAIL_SYSTEM = ("You are a customer service agent for an online retail store. Use the tools "
                 "to help the user. Call exactly one tool.")
TELECOM_SYSTEM = ("You are a customer service agent for a mobile carrier. Use the tools to help "
                  "the user. Call exactly one tool.")

RETAIL_ASKS = [
    "My email is noah.brown7922@example.com, can you find my account?",
    "Look up the user id for the email yusuf.rossi@example.com please.",
    "What is the status of my order #W2378156?",
    "Can you check order #W4817420 for me?",
    "Please cancel order #W5918442, I no longer need it.",
    "I ordered #W6779827 by mistake, cancel it.",
    "Cancel my pending order #W9384736 because I ordered it by mistake.",
    "Return item 4900990404 from my delivered order #W3792453, refund to gift_card_7219486.",
    "I want to return items 1725100896 and 6777246137 of order #W2166301, "
    "refund them to paypal_1808675.",
    "Tell me about product 6086499569.",
    "Is product 1656367028 in stock?",
    "Hi, order #W7273336 - where is it?",
    "Please cancel #W8367380; reason: no longer needed.",
    "My email is mei.kovacs8020@example.com. I need help with an order.",
    "Return the item 7624783998 in order #W7736983 and put the money on credit_card_9513926.",
    "Could you get details for order #W3019187?",
    "Check the product with id 2524789262.",
]

TELECOM_ASKS = [
    "My number is 555-123-2002, can you find my account?",
    "Look up the customer with phone 555-987-6543.",
    "How much data has line L1001 used? I am customer C1001.",
    "Customer C2040 here, check data usage on line L2041.",
    "I lost my phone. Suspend line L1001 for customer C1001.",
    "I'm travelling for a month, suspend my line L3302, customer id C3300.",
    "Please enable roaming on line L1001, customer C1001.",
    "I'm going abroad tomorrow. Customer C2040, line L2041: turn on roaming.",
    "Add 2 GB of data to line L1001 for customer C1001.",
    "Customer C3300, line L3302: refuel 5 GB please.",
    "My data ran out. I'm C2040 on line L2042, add 1 GB.",
    "Find the account for phone number 555-000-1111.",
    "Suspend line L4401 of customer C4400, reason other.",
    "Customer C1001 wants roaming on line L1002.",
    "Check data usage for customer C4400 line L4401.",
    "Give me 0.5 GB more on line L3302, I'm customer C3300.",
    "Who owns the number 555-222-3333?",
]


def requests() -> list[tuple[str, dict[str, Any]]]:
    """(id, chat-completion body) for every prompt, at temperature 0."""
    out: list[tuple[str, dict[str, Any]]] = []
    for domain, system, tools, asks in (("retail", RETAIL_SYSTEM, RETAIL_TOOLS, RETAIL_ASKS),
                                        ("telecom", TELECOM_SYSTEM, TELECOM_TOOLS, TELECOM_ASKS)):
        for index, ask in enumerate(asks):
            out.append((f"{domain}-{index:02d}", {
                "model": "embedded",
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": ask}],
                "tools": tools,
                "temperature": 0,
                "max_tokens": 160,
            }))
    return out
