from django.urls import path

from . import api

urlpatterns = [
    path("webhooks", api.WebhookList.as_view(), name="api-webhooks"),
    path("webhooks/<int:pk>", api.WebhookDetail.as_view(), name="api-webhook"),
    path("webhook-deliveries", api.DeliveryList.as_view(), name="api-webhook-deliveries"),
    path("webhook-deliveries/<int:pk>/resend", api.DeliveryResend.as_view(), name="api-webhook-delivery-resend"),
    path("notification-channels", api.ChannelList.as_view(), name="api-notification-channels"),
    path("notification-channels/<int:pk>", api.ChannelDetail.as_view(), name="api-notification-channel"),
    path("notification-channels/<int:pk>/test", api.ChannelTest.as_view(), name="api-notification-channel-test"),
    path("notification-rules", api.RuleList.as_view(), name="api-notification-rules"),
    path("notification-rules/<int:pk>", api.RuleDetail.as_view(), name="api-notification-rule"),
]
