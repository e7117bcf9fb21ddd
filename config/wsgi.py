import os

import django
from django.core.wsgi import get_wsgi_application

from config.tracing import WEB_SERVICE_NAME, configure_tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)  # the log format first: tracing's warning lines are log lines too
# Before the application is built: Django's instrumentation adds a middleware.
configure_tracing(service_name=WEB_SERVICE_NAME, web=True)
application = get_wsgi_application()
