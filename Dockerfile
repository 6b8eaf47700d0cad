FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 CONTROLPANEL_DATA_DIR=/data
WORKDIR /app
# The panel runs as its own unprivileged user; /data (a volume in docker-compose.yml) is private
# to it (0700; the panel also creates every file 0600, see CONTROLPANEL_UMASK).
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin panel \
    && install -d -o panel -g panel -m 0700 /data
COPY pyproject.toml README.md ./
COPY controlpanel ./controlpanel
COPY deployments ./deployments
COPY hardware ./hardware
COPY hostagent ./hostagent
RUN pip install --no-cache-dir .
# .dockerignore keeps .env, data/, .venv/, .git/ and caches out of this copy.
COPY . .
USER panel
EXPOSE 8000
CMD ["gunicorn", "controlpanel.wsgi", "-b", "0.0.0.0:8000", "-w", "4", "--threads", "4"]
