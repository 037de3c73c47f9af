#!/usr/bin/env python3
"""Write the sample data files; seeded, so every run writes the same bytes.

    python3 samples/make_data.py            # rewrite samples/access-log.jsonl and samples/sensors.txt
    python3 samples/make_data.py --out DIR  # write them somewhere else (tests compare the two)

access-log.jsonl: 2,000 web access-log records as JSON lines, keys in this order:
    {"ts": "2024-03-01T00:00:03.412Z", "ip": "203.0.113.7", "method": "GET", "path": "/api/v1/orders/1042",
     "status": 200, "bytes": 1834, "ua": "Mozilla/5.0 ..."}
sensors.txt: 1,000 keyed lines `sensor-id:{"temp": 21.4, "hum": 48.2}` for `klog produce -K:`.

Standard library only, no third-party imports: the data must not change when a dependency does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
from pathlib import Path

SEED = 20240301
ACCESS_LOG_RECORDS = 2000
SENSOR_READINGS = 1000
START = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)

# a few busy clients (an office NAT, a monitoring probe, a crawler) and a long tail
BUSY_IPS = ["198.51.100.23", "203.0.113.7", "192.0.2.44"]
USER_AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/122.0.0.0 "
    "Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_3) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.3 "
    "Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:123.0) Gecko/20100101 Firefox/123.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_3 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.3 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "curl/8.5.0",
    "python-requests/2.31.0",
    "kube-probe/1.29",
]
UA_WEIGHTS = [30, 18, 10, 15, 6, 5, 6, 10]
SENSORS = [f"{room}-{n:02d}" for room in ("greenhouse", "cellar", "attic", "office") for n in (1, 2, 3)]


def access_record(rng: random.Random, t: dt.datetime) -> dict:
    ua_index = rng.choices(range(len(USER_AGENTS)), UA_WEIGHTS)[0]
    ua = USER_AGENTS[ua_index]
    if ua.startswith("kube-probe"):
        ip, method, path = "10.0.3.17", "GET", "/healthz"
    else:
        ip = rng.choice(BUSY_IPS) if rng.random() < 0.35 else random_ip(rng)
        method, path = request_line(rng)
    status, size = response(rng, method, path)
    return {"ts": t.isoformat(timespec="milliseconds").replace("+00:00", "Z"), "ip": ip, "method": method,
            "path": path, "status": status, "bytes": size, "ua": ua}


def random_ip(rng: random.Random) -> str:
    first = rng.choice([81, 92, 185, 203, 212])
    return f"{first}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


def request_line(rng: random.Random) -> tuple[str, str]:
    kind = rng.choices(["page", "static", "api-read", "api-write", "login", "odd"], [22, 30, 25, 10, 5, 8])[0]
    if kind == "page":
        return "GET", rng.choice(["/", "/index.html", "/products", "/products?page=2", "/about", "/cart",
                                  f"/products/{rng.randrange(1, 400)}"])
    if kind == "static":
        return rng.choice(["GET", "GET", "GET", "HEAD"]), rng.choice(
            ["/static/app.js", "/static/app.css", "/static/logo.svg", "/favicon.ico",
             f"/static/img/p{rng.randrange(1, 400)}.webp"])
    if kind == "api-read":
        return "GET", rng.choice([f"/api/v1/orders/{rng.randrange(1000, 1300)}", "/api/v1/orders?status=open",
                                  f"/api/v1/users/{rng.randrange(1, 90)}", "/api/v1/search?q=kafka+log"])
    if kind == "api-write":
        method = rng.choice(["POST", "POST", "PUT", "DELETE", "PATCH"])
        target = "/api/v1/orders" if method == "POST" else f"/api/v1/orders/{rng.randrange(1000, 1300)}"
        return method, target
    if kind == "login":
        return rng.choice(["GET", "POST"]), "/login"
    return rng.choice(["GET", "POST"]), rng.choice(["/wp-login.php", "/.env", "/admin", "/api/v2/orders",
                                                    "/cgi-bin/luci", "/old-page.html"])


def response(rng: random.Random, method: str, path: str) -> tuple[int, int]:
    if path == "/healthz":
        return 200, 2
    if path in ("/wp-login.php", "/.env", "/cgi-bin/luci", "/api/v2/orders"):
        return 404, 153
    if path == "/admin":
        return 401, 0
    if path == "/old-page.html":
        return 301, 0
    if path.startswith("/api/"):
        status = rng.choices([200, 201, 204, 400, 404, 409, 500, 502, 503], [70, 6, 4, 5, 5, 2, 4, 2, 2])[0]
        if method == "POST" and status == 200:
            status = 201
        size = 0 if status == 204 else (rng.randrange(40, 200) if status >= 400 else rng.randrange(300, 9000))
        return status, size
    if path.startswith("/static/") or path == "/favicon.ico":
        status = rng.choices([200, 304], [60, 40])[0]
        size = 0 if status == 304 or method == "HEAD" else rng.randrange(900, 250_000)
        return status, size
    status = rng.choices([200, 302, 404, 500], [90, 3, 5, 2])[0]
    return status, rng.randrange(4000, 60_000) if status == 200 else rng.randrange(0, 500)


def access_log(rng: random.Random) -> list[str]:
    t = START
    lines = []
    for _ in range(ACCESS_LOG_RECORDS):
        t += dt.timedelta(milliseconds=rng.randrange(5, 4000))
        lines.append(json.dumps(access_record(rng, t)))
    return lines


def sensors(rng: random.Random) -> list[str]:
    base = {name: (rng.uniform(4, 24), rng.uniform(35, 80)) for name in SENSORS}
    lines = []
    for i in range(SENSOR_READINGS):
        name = rng.choice(SENSORS)
        temp0, hum0 = base[name]
        # one slow day-night wave over the whole file, plus sensor noise
        wave = 3.0 * math.sin(2 * math.pi * i / SENSOR_READINGS)
        reading = {"temp": round(temp0 + wave + rng.gauss(0, 0.4), 1),
                   "hum": round(min(99.0, max(5.0, hum0 - wave + rng.gauss(0, 1.5))), 1)}
        lines.append(f"{name}:{json.dumps(reading)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    for name, lines in (("access-log.jsonl", access_log(rng)), ("sensors.txt", sensors(rng))):
        (args.out / name).write_text("\n".join(lines) + "\n", encoding="utf-8", newline="\n")


if __name__ == "__main__":
    main()
