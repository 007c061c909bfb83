# The durability worker. Build: docker build -t durability-worker .
FROM python:3.11.7-slim-bookworm
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY workflows ./workflows
COPY activities ./activities
COPY durability ./durability
COPY worker.py ./
# No extras: a worker needs neither the dev server binaries nor the test tools.
RUN pip install -c constraints.txt . && useradd --create-home --uid 10001 durability
# Numeric, so Kubernetes can check runAsNonRoot (deploy/kubernetes runs it as 10001).
USER 10001:10001
EXPOSE 9464
STOPSIGNAL SIGTERM
CMD ["python", "worker.py"]
