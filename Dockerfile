# The durability worker. Build: docker build -t durability-worker .
FROM python:3.11.7-slim-bookworm
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY workflows ./workflows
COPY activities ./activities
COPY durability ./durability
COPY worker.py ./
RUN pip install . && useradd --create-home durability
USER durability
EXPOSE 9464
STOPSIGNAL SIGTERM
CMD ["python", "worker.py"]
