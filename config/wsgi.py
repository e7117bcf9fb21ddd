import os

from django.core.wsgi import get_wsgi_application

from config.tracing import configure_tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
configure_tracing()  # before the application is built: Django's instrumentation adds a middleware
application = get_wsgi_application()
