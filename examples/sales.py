"""Writes sales.csv: a year of made-up daily sales (fixed seed), for the examples."""

import random

PRICES = {"widget": 4.5, "gadget": 12.0, "gizmo": 30.0}
DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def make_sales_csv(path="sales.csv", seed=2025):
    rng = random.Random(seed)
    rows = ["date,product,units,unit_price"]
    trend = 1.0
    for month, ndays in enumerate(DAYS, start=1):
        trend *= rng.uniform(0.9, 1.25)
        for day in range(1, ndays + 1):
            for product, price in PRICES.items():
                units = max(0, int(rng.gauss(10, 3) * trend))
                rows.append(f"2025-{month:02d}-{day:02d},{product},{units},{price}")
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")
    return path


if __name__ == "__main__":
    print(make_sales_csv())
