#!/usr/bin/python3
# Parses a Prometheus text exposition (stdin) with prometheus_client's parser,
# Debian's python3-prometheus-client, and prints its samples as JSON lines:
# {"family", "type", "name", "labels", "value"}. A text the parser refuses
# exits 1 with its error on stderr.
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

try:
    for family in text_string_to_metric_families(sys.stdin.read()):
        for s in family.samples:
            print(json.dumps({"family": family.name, "type": family.type, "name": s.name,
                              "labels": s.labels, "value": s.value}))
except Exception as e:  # the parser's ValueError, or anything it trips on
    print(f"prometheus_client refused the text: {e}", file=sys.stderr)
    sys.exit(1)
