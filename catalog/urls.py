from django.urls import path

from catalog import views

app_name = "catalog"
urlpatterns = [
    path("property-objects/<uuid:card_id>/", views.property_object_detail, name="property-object-detail"),
    path("projects/<uuid:card_id>/", views.project_detail, name="project-detail"),
]
