#!/usr/bin/python3
"""A delayd.v1.JobReceiver for the black-box tests (python3-grpcio).

    receiver.py PROTO_DIR RECORD_FILE

Generates its Python code from the shipped .proto files with protoc and
grpc_python_plugin (into a temporary directory), serves Deliver on a free
loopback port and prints "port N" once listening. Each call is appended to
RECORD_FILE as a JSON line before it is answered. The answer depends on the
job's topic:
  ok...      OK
  flaky...   UNAVAILABLE at attempt 1, OK after
  refuse...  INVALID_ARGUMENT "order 8812 is unknown"
  hang...    answers OK after 3 s (past a short deadline)
Two more ports, printed as "garbage N" and "reset N": the first answers every
Deliver OK with bytes that are no Delivered message, the second accepts
connections, reads what comes, answers bytes that are not HTTP/2 and resets
them (SO_LINGER 0).
Stops on SIGTERM, or once the process that started it is gone.
"""
import base64
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures


def generate(proto_dir, out):
    files = [os.path.join("delayd/v1", f) for f in sorted(os.listdir(os.path.join(proto_dir, "delayd/v1")))
             if f.endswith(".proto")]
    subprocess.run(["protoc", "-I", proto_dir, "-I", "/usr/include", "--python_out", out,
                    "--grpc_out", out, "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin"] + files,
                   check=True)
    sys.path.insert(0, out)


def main():
    proto_dir, record_file = sys.argv[1], sys.argv[2]
    gen = tempfile.mkdtemp(prefix="delayd-grpc-py-")
    generate(proto_dir, gen)
    import grpc
    from delayd.v1 import receiver_pb2, receiver_pb2_grpc

    lock = threading.Lock()

    def ms(t):
        return t.seconds * 1000 + t.nanos // 1_000_000

    class Receiver(receiver_pb2_grpc.JobReceiverServicer):
        def Deliver(self, request, context):
            record = {
                "id": request.id, "topic": request.topic, "key": request.key,
                "attempt": request.attempt, "due_ms": ms(request.due_at), "run_ms": ms(request.run_at),
                "timer_id": request.timer_id, "fire_ms": ms(request.fire_at),
                "body_b64": base64.b64encode(request.body).decode(), "body_is_json": request.body_is_json,
                "metadata": {k: v for k, v in context.invocation_metadata()},
                "at_ms": int(time.time() * 1000),
            }
            with lock, open(record_file, "a") as f:
                f.write(json.dumps(record) + "\n")
            topic = request.topic
            if topic.startswith("flaky") and request.attempt == 1:
                context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
            if topic.startswith("refuse"):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "order 8812 is unknown")
            if topic.startswith("hang"):
                time.sleep(3)
            return receiver_pb2.Delivered()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    receiver_pb2_grpc.add_JobReceiverServicer_to_server(Receiver(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()

    def garbage(request, context):
        with lock, open(record_file, "a") as f:
            f.write(json.dumps({"garbage": True}) + "\n")
        return b"\x0f\x0f"  # field 1 of wire type 7, which does not exist: no Delivered
    garbage_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    garbage_server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "delayd.v1.JobReceiver", {"Deliver": grpc.unary_unary_rpc_method_handler(
            garbage, request_deserializer=None, response_serializer=None)})])
    garbage_port = garbage_server.add_insecure_port("127.0.0.1:0")
    garbage_server.start()

    resetter = socket.socket()
    resetter.bind(("127.0.0.1", 0))
    resetter.listen(16)

    def reset_loop():
        while True:
            conn, _ = resetter.accept()
            conn.settimeout(2)
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nnot grpc")
            except OSError:
                pass
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
    threading.Thread(target=reset_loop, daemon=True).start()
    print(f"port {port}", flush=True)
    print(f"garbage {garbage_port}", flush=True)
    print(f"reset {resetter.getsockname()[1]}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    parent = os.getppid()
    while not done.wait(0.5):
        if os.getppid() != parent:  # the test that started it is gone
            break
    server.stop(0)
    garbage_server.stop(0)


if __name__ == "__main__":
    main()
