import pytest


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client
