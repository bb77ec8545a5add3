from django.urls import path

from . import api

urlpatterns = [
    path("webhooks", api.WebhookList.as_view(), name="api-webhooks"),
    path("webhooks/<int:pk>", api.WebhookDetail.as_view(), name="api-webhook"),
    path("webhook-deliveries", api.DeliveryList.as_view(), name="api-webhook-deliveries"),
    path("webhook-deliveries/<int:pk>/resend", api.DeliveryResend.as_view(), name="api-webhook-delivery-resend"),
]
