"""`manage.py demo_admin` (`make admin`): on a demo catalog, a staff user with a new random password, printed once,
and where to log in (see `catalog.demo_admin`). `make admin` then serves the app."""

from django.core.management.base import BaseCommand, CommandError
from django.urls import reverse

from catalog.demo_admin import DEMO_STAFF_USERNAME, DemoAdminRefused, check_demo_catalog, create_staff_user


class Command(BaseCommand):
    help = (
        "On a demo catalog (made by make demo) only: create the staff user demo-staff, or give it a new random "
        "password, and print it once with the address of the Delisted retention page."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--address", default="127.0.0.1:8000", help="host:port the app will be served on (default 127.0.0.1:8000)"
        )

    def handle(self, *args, **options):
        try:
            check_demo_catalog()
        except DemoAdminRefused as refused:
            raise CommandError(str(refused)) from None
        password = create_staff_user()
        page = f"http://{options['address']}{reverse('admin:catalog_delistedretention_changelist')}"
        self.stdout.write(
            "\n".join(
                [
                    f"Staff user {DEMO_STAFF_USERNAME}, password {password}",
                    "(shown once: the next make admin gives it a new one)",
                    f"The Delisted retention page: {page}",
                ]
            )
        )
