#!/usr/bin/python3
"""A RabbitMQ client outside delayd (python3-pika), for tests/amqp_push_test.cc.

  broker.py URI setup EXCHANGE QUEUE KEY   a durable direct exchange and a
                                           durable queue bound to it by KEY
  broker.py URI drain QUEUE MAX WAIT_S     takes (and acks) up to MAX messages,
                                           stopping when none came for WAIT_S
                                           seconds; one JSON object a line

Each drained message: body_base64, message_id, content_type, delivery_mode,
routing_key and headers (names and values as strings).
"""
import base64
import json
import sys
import time

import pika


def main():
    uri, command = sys.argv[1], sys.argv[2]
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    if command == "setup":
        exchange, queue, key = sys.argv[3:6]
        ch.exchange_declare(exchange=exchange, exchange_type="direct", durable=True)
        ch.queue_declare(queue=queue, durable=True)
        ch.queue_bind(queue=queue, exchange=exchange, routing_key=key)
        print("ok")
    elif command == "drain":
        queue, most, wait_s = sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
        taken = 0
        last = time.monotonic()
        while taken < most and time.monotonic() - last < wait_s:
            method, props, body = ch.basic_get(queue=queue, auto_ack=True)
            if method is None:
                time.sleep(0.05)
                continue
            last = time.monotonic()
            taken += 1
            headers = {k: (v.decode() if isinstance(v, bytes) else str(v))
                       for k, v in (props.headers or {}).items()}
            print(json.dumps({
                "body_base64": base64.b64encode(body).decode(),
                "message_id": props.message_id,
                "content_type": props.content_type,
                "delivery_mode": props.delivery_mode,
                "routing_key": method.routing_key,
                "headers": headers,
            }), flush=True)
    else:
        sys.exit("unknown command " + command)
    conn.close()


if __name__ == "__main__":
    main()
