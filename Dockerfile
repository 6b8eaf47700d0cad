FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY controlpanel ./controlpanel
COPY deployments ./deployments
COPY hardware ./hardware
RUN pip install --no-cache-dir .
COPY . .
EXPOSE 8000
CMD ["gunicorn", "controlpanel.wsgi", "-b", "0.0.0.0:8000", "-w", "4", "--threads", "4"]
