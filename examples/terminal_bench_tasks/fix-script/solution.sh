sed -i 's/values\[1:\]/values/' /app/stats.py
python3 /app/stats.py 2 4 9
