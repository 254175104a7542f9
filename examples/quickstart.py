"""cpuos quickstart: upload a CSV, analyze it with pandas in a sandbox, download the chart.

    export CPUOS_API_URL=http://127.0.0.1:7070 CPUOS_API_KEY=cpuos_...
    python3 examples/quickstart.py
"""

from cpuos import Sandbox

from sales import make_sales_csv

ANALYSIS = """
import pandas as pd
import matplotlib.pyplot as plt

df = pd.read_csv("/work/sales.csv", parse_dates=["date"])
df["revenue"] = df["units"] * df["unit_price"]
monthly = df.groupby(df["date"].dt.to_period("M"))["revenue"].sum()
growth = monthly.diff()

ax = monthly.plot(kind="bar", title="Revenue per month", color="#4c72b0")
ax.set_xlabel("month")
ax.set_ylabel("revenue")
plt.tight_layout()
plt.savefig("/work/chart.png", dpi=120)

print(monthly.round(2).to_string())
print(f"{growth.idxmax()} {growth.max():.2f}")
"""


def main():
    make_sales_csv("sales.csv")
    with Sandbox.create(template="python", timeout="10m") as sbx:
        print(f"sandbox {sbx.id} is running")
        with open("sales.csv", "rb") as f:
            sbx.files.write("/work/sales.csv", f)
        sbx.files.write("/work/analyze.py", ANALYSIS)
        run = sbx.exec("cd /work && python analyze.py", timeout="2m")
        if run.exit_code != 0:
            raise SystemExit(f"the analysis failed ({run.exit_code}):\n{run.stderr}")
        *table, last = run.stdout.strip().splitlines()
        month, amount = last.split()
        print("\n".join(table))
        sbx.files.download("/work/chart.png", "chart.png")
    print("saved chart.png")
    print(f"the month that grew the most: {month} (+{amount})")


if __name__ == "__main__":
    main()
